"""The real thing: build the CPU image, start the compose stack, talk to it with the client,
stop it with SIGTERM, remove everything. Marked ``docker``; skipped, with the reason, where no
Docker daemon (or no compose CLI) is reachable.

No registry is needed: the base image is ``$ATTNSERVE_DOCKER_BASE_IMAGE`` or one built from
Debian's packages by ``docker/base-image.sh`` (removed afterwards when this run built it; run
the script once yourself to keep one between runs), and every pip install in the build reads
a wheelhouse this test downloads on the host into ``docker/wheelhouse/test-<id>/`` (removed
afterwards). Containers use the host's network and
are reached on 127.0.0.1 only (dockerd may run with ``--bridge=none --iptables=false``), so
the test runs the compose file as ``compose config`` resolves it with the service's port
mappings replaced by host networking.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from .conftest import DOCKER, ROOT, compose_command, free_port, resolved_compose

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BIN = Path(sys.executable).parent
DEFAULT_BASE = "attnserve-base:py311-bookworm"
EXAMPLES = ROOT / "examples"


def _run(cmd: list[str], timeout: float, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} -> {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="session")
def compose_cli() -> list[str]:
    """The compose CLI, once a Docker daemon answers (checked before any other fixture is built)."""
    return _docker_or_skip()


def _docker_or_skip() -> list[str]:
    if shutil.which("docker") is None:
        pytest.skip("docker: no docker CLI on this machine (.ci/run installs docker.io and starts dockerd)")
    try:
        info = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.skip("docker: the Docker daemon did not answer `docker info` in 60 s")
    if info.returncode != 0:
        pytest.skip(f"docker: no Docker daemon reachable: {info.stderr.strip()[:300]}")
    compose = compose_command()
    if compose is None:
        pytest.skip("docker: neither `docker compose` nor `docker-compose` is installed")
    return compose


def _base_image(timings: dict[str, float]) -> str:
    base = os.environ.get("ATTNSERVE_DOCKER_BASE_IMAGE", DEFAULT_BASE)
    if subprocess.run(["docker", "image", "inspect", base], capture_output=True, timeout=60).returncode == 0:
        return base
    if base != DEFAULT_BASE:
        pytest.fail(f"ATTNSERVE_DOCKER_BASE_IMAGE={base} is not a local image")
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        pytest.skip(f"docker: no base image {base}, and building one needs root and debootstrap")
    start = time.monotonic()
    _run(["bash", str(DOCKER / "base-image.sh"), base], timeout=900)
    timings["base image (debootstrap)"] = time.monotonic() - start
    return base


def _wheelhouse(folder: Path) -> None:
    """Every wheel the build venvs need (the import extra: the build stage's export extra and what
    the models service's pull stage adds), fetched by the host's pip (the container's pip has no
    route to an index here); ``pip wheel`` builds one for any requirement published only as source."""
    reqs = folder / "requirements.txt"
    listing = _run([sys.executable, str(DOCKER / "requirements.py"), "--extra", "import"], timeout=60).stdout
    folder.mkdir(parents=True)
    reqs.write_text(listing)
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--prefer-binary", "-w", str(folder)]
    _run([*cmd, "-r", str(reqs), "setuptools>=77", "wheel"], timeout=1200)
    reqs.unlink()


def _images() -> dict[str, dict]:
    """Every local image, intermediate build layers included, by id."""
    ids = _run(["docker", "images", "-a", "-q", "--no-trunc"], timeout=60).stdout.split()
    if not ids:
        return {}
    return {i["Id"]: i for i in json.loads(_run(["docker", "image", "inspect", *set(ids)], timeout=120).stdout)}


def _remove_build_leftovers(before: set[str], base: str) -> None:
    """The build stage's untagged layers that this run created (the classic builder keeps them
    as build cache): new since ``before``, no tag, descending from ``base``; newest first."""
    try:
        images = _images()
        base_id = _run(["docker", "image", "inspect", "--format", "{{.Id}}", base], timeout=60).stdout.strip()
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        print(f"clean-up: could not list images: {exc}")
        return

    def from_base(image_id: str) -> bool:
        while image_id and image_id in images:
            if image_id == base_id:
                return True
            image_id = images[image_id].get("Parent", "")
        return False

    ours = [i for i in images.values() if i["Id"] not in before and not i.get("RepoTags") and from_base(i["Id"])]
    ours.sort(key=lambda i: i["Created"], reverse=True)
    if ours:
        _quietly(["docker", "rmi", *(i["Id"] for i in ours)], timeout=300)


def _health(container: str) -> str:
    proc = _run(["docker", "inspect", "--format", "{{json .State}}", container], timeout=60)
    state = json.loads(proc.stdout)
    return state.get("Health", {}).get("Status", "none") if state["Running"] else f"exited {state['ExitCode']}"


def _client(address: str, *args: str) -> object:
    proc = _run([str(BIN / "attnserve-client"), "--address", address, "--json", *args], timeout=120)
    return json.loads(proc.stdout)


def _stack_config(environ: dict[str, str], port: int, metrics_port: int, http_port: int) -> dict:
    """The stack that ``up`` starts by default (the services with no profile) as ``compose
    config`` resolves it under ``environ``, moved onto the host's network on 127.0.0.1."""
    config = resolved_compose(environ)
    config["services"] = {n: s for n, s in config["services"].items() if not s.get("profiles")}
    assert set(config["services"]) == {"models", "attnserve"}
    # The one-shot models service pulls from the network (nothing to pull here: it would only exit);
    # the server stack is tested on its own (its pull is tested by tests/export/test_pull*.py).
    del config["services"]["models"]
    service = config["services"]["attnserve"]
    service.pop("depends_on")
    service.pop("ports")  # published ports do not exist on the host's network: the server binds them itself
    service.pop("networks", None)  # v2's config names the default network; host networking replaces it
    config.pop("networks", None)
    service["network_mode"] = "host"
    service["build"]["network"] = "host"
    service["environment"] |= {
        "ATTNSERVE_HOST": "127.0.0.1",
        "ATTNSERVE_PORT": str(port),
        "ATTNSERVE_METRICS_PORT": str(metrics_port),
        "ATTNSERVE_HTTP_PORT": str(http_port),
    }
    config["volumes"] = {"attnserve-models": config["volumes"]["attnserve-models"]}
    return config


def _wait_healthy(up_cmd: list[str], deadline_s: float = 240) -> str:
    """The attnserve container's id once Docker's HEALTHCHECK reports healthy."""
    container = _run([*up_cmd, "ps", "-q", "attnserve"], timeout=60).stdout.strip()
    assert container, "compose up started no container"
    deadline = time.monotonic() + deadline_s
    while (status := _health(container)) != "healthy":
        logs = _run(["docker", "logs", container], timeout=60, check=False).stderr[-4000:]
        assert status in ("starting", "unhealthy"), f"container {status}:\n{logs}"
        assert time.monotonic() < deadline, f"not healthy in {deadline_s:.0f} s ({status}):\n{logs}"
        time.sleep(2)
    return container


def _quietly(cmd: list[str], timeout: float) -> None:
    """A clean-up step: its failure must not hide the test's own error, nor stop the next step."""
    try:
        subprocess.run(cmd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"clean-up timed out: {' '.join(cmd)}")


def test_compose_stack_builds_serves_and_stops_cleanly(compose_cli, tiny_repo, tmp_path):
    compose = compose_cli
    timings: dict[str, float] = {}
    run_id = uuid.uuid4().hex[:8]
    project = f"attnserve-test-{run_id}"
    image = f"attnserve-test-{run_id}:cpu"
    wheelhouse = DOCKER / "wheelhouse" / f"test-{run_id}"
    port, metrics_port, http_port = free_port(), free_port(), free_port()
    compose_file = tmp_path / "docker-compose.yml"
    had_base = (
        subprocess.run(["docker", "image", "inspect", DEFAULT_BASE], capture_output=True, timeout=60).returncode == 0
    )
    base = _base_image(timings)
    made_base = base == DEFAULT_BASE and not had_base
    environ = {
        "ATTNSERVE_BASE_IMAGE": base,
        "ATTNSERVE_IMAGE": image,
        "ATTNSERVE_WHEELHOUSE": str(wheelhouse.relative_to(ROOT)),
        "ATTNSERVE_PREPROCESS_THREADS": "1",
    }
    up_cmd = [*compose, "-p", project, "-f", str(compose_file)]
    address = f"127.0.0.1:{port}"
    before = set(_images())
    try:
        start = time.monotonic()
        _wheelhouse(wheelhouse)
        timings["wheelhouse (pip wheel on the host)"] = time.monotonic() - start
        compose_file.write_text(yaml.safe_dump(_stack_config(environ, port, metrics_port, http_port), sort_keys=False))

        start = time.monotonic()
        _run([*up_cmd, "build", "attnserve"], timeout=2400)
        timings["image build (compose build)"] = time.monotonic() - start
        size = int(_run(["docker", "image", "inspect", "--format", "{{.Size}}", image], timeout=60).stdout)
        image_config = json.loads(
            _run(["docker", "image", "inspect", "--format", "{{json .Config}}", image], timeout=60).stdout
        )
        assert image_config["User"] == "attnserve:attnserve"
        assert image_config["Entrypoint"] == ["attnserve-server"]
        no_torch = _run(
            ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python", image, "-c", "import torch"],
            timeout=120,
            check=False,
        )
        assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr

        # 1. The bundled models, from the image (through the named volume it fills).
        start = time.monotonic()
        _run([*up_cmd, "up", "-d", "--no-build", "attnserve"], timeout=300)
        container = _wait_healthy(up_cmd)
        timings["up -> healthy"] = time.monotonic() - start

        assert {m["name"] for m in _client(address, "models")} == {"translator-en-de", "digits-vit"}
        start = time.monotonic()
        english, german = (EXAMPLES / "sentences.tsv").read_text().splitlines()[1].split("\t")
        (translated,) = _client(address, "translate", english)
        assert translated["text"] == german
        # the same over KServe v2 REST on the HTTP port
        body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [english]}]}
        request = urllib.request.Request(
            f"http://127.0.0.1:{http_port}/v2/models/translator-en-de/infer", data=json.dumps(body).encode()
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert json.loads(reply.read())["outputs"][0]["data"] == [german]
        digits = sorted((EXAMPLES / "digits").glob("digit-*.png"))
        results = _client(address, "classify", *map(str, digits), "--top-k", "1")
        assert [r["labels"][0]["label"] for r in results] == [p.stem.split("-")[1] for p in digits]
        timings["translate + classify 10 images (2 client runs)"] = time.monotonic() - start

        start = time.monotonic()
        _run([*up_cmd, "stop", "attnserve"], timeout=120)
        timings["stop (SIGTERM -> drained -> exit)"] = time.monotonic() - start
        state = json.loads(_run(["docker", "inspect", "--format", "{{json .State}}", container], timeout=60).stdout)
        logs = _run(["docker", "logs", container], timeout=60).stderr
        assert (state["Running"], state["ExitCode"], state["OOMKilled"]) == (False, 0, False), logs[-4000:]
        assert "received SIGTERM" in logs

        # 2. A user's own model repository mounted over the default one (ATTNSERVE_MODELS).
        #    The container runs as uid 10001: the files must be world-readable.
        own = tmp_path / "my-models"
        shutil.copytree(tiny_repo, own)
        for path in [own, *own.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        own_config = _stack_config({**environ, "ATTNSERVE_MODELS": str(own)}, port, metrics_port, http_port)
        compose_file.write_text(yaml.safe_dump(own_config, sort_keys=False))
        start = time.monotonic()
        _run([*up_cmd, "up", "-d", "--no-build", "attnserve"], timeout=300)
        _wait_healthy(up_cmd)
        timings["up with ATTNSERVE_MODELS -> healthy"] = time.monotonic() - start
        assert [m["name"] for m in _client(address, "models")] == ["digits"]
    finally:
        if compose_file.exists():
            _quietly([*up_cmd, "down", "-v", "--remove-orphans", "-t", "30"], timeout=300)
        _quietly(["docker", "rmi", "-f", image], timeout=300)  # removing the tag prunes its untagged layers
        _remove_build_leftovers(before, base)
        if made_base:
            _quietly(["docker", "rmi", base], timeout=300)
        shutil.rmtree(wheelhouse, ignore_errors=True)
    label = f"label=com.docker.compose.project={project}"
    assert _run(["docker", "ps", "-a", "-q", "--filter", label], timeout=60).stdout.strip() == ""
    assert _run(["docker", "volume", "ls", "-q", "--filter", label], timeout=60).stdout.strip() == ""
    assert set(_images()) <= before, "images left behind"
    if made_base:
        gone = subprocess.run(["docker", "image", "inspect", base], capture_output=True, timeout=60)
        assert gone.returncode != 0, f"base image {base} left behind"
    report = "\n".join(f"  {name}: {seconds:.1f} s" for name, seconds in timings.items())
    print(f"\ndocker stack test ({base}): image {image} {size / 1e6:.0f} MB\n{report}")
