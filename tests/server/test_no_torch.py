"""The runtime never imports torch: every module of the contract, server, client and protos
imports with torch made unimportable (docs/architecture.md, "Data flow")."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_contract_server_client_and_protos_import_without_torch():
    script = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        sys.modules["onnx"] = None  # the export-side libraries are not runtime dependencies either
        names = []
        for pkg_name in ("attnserve.contract", "attnserve.server", "attnserve.client", "attnserve.protos"):
            pkg = importlib.import_module(pkg_name)
            names.append(pkg_name)
            for info in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
                importlib.import_module(info.name)
                names.append(info.name)
        assert "torch" not in {m for m in sys.modules if sys.modules[m] is not None}
        print(len(names))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) >= 3


def test_the_check_itself_catches_a_torch_import(tmp_path):
    """The blocking trick really blocks: importing torch under it fails."""
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['torch'] = None; import torch"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "import of torch halted" in proc.stderr
