"""The deployment files without building anything: the compose file parses and names real
paths, every server setting reaches the container, the Dockerfiles keep torch out of the
runtime and run as a non-root user, and the container's command and health probe work on
this host against a live server."""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import tomllib
import yaml

from attnserve.server.shared.config import Settings
from attnserve.server.shared.config_sources import env_name

from .conftest import (
    DOCKER,
    DOCKERFILES,
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    ROOT,
    compose_command,
    environment,
    free_port,
    parse_dockerfile,
    port_pairs,
    resolved_compose,
)

BIN = Path(sys.executable).parent


def _script(name: str):
    """docker/<name>.py, a script beside the Dockerfiles (not a package module), as a module."""
    spec = importlib.util.spec_from_file_location(f"attnserve_docker_{name}", DOCKER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


healthcheck = _script("healthcheck")
requirements = _script("requirements")


@pytest.fixture(scope="module")
def compose() -> dict:
    return resolved_compose()


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(ms|s|m|h)", str(duration)))


def test_compose_file_parses_with_its_services_and_profiles(compose):
    if compose_command() is None:
        print("no docker compose CLI here: checked with PyYAML and this test's own interpolation")
    services = compose["services"]
    assert set(services) == {"models", "attnserve", "attnserve-gpu", "envoy", "prometheus"}
    assert "profiles" not in services["attnserve"]  # `docker compose up` starts it (and models, first)
    assert services["attnserve-gpu"]["profiles"] == ["gpu"]
    assert services["envoy"]["profiles"] == ["scale"]
    assert services["prometheus"]["profiles"] == ["monitoring"]
    gpu = services["attnserve-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert gpu[0]["driver"] == "nvidia" and "gpu" in str(gpu[0]["capabilities"])


def test_attnserve_service_publishes_grpc_http_and_metrics_and_restarts(compose):
    for name in ("attnserve", "attnserve-gpu"):
        service = compose["services"][name]
        assert {target for _, target in port_pairs(service)} == {GRPC_PORT, HTTP_PORT, METRICS_PORT}
        assert service["restart"] == "unless-stopped"
        assert service["healthcheck"]["test"] == ["CMD", "python", "/opt/attnserve/healthcheck.py"]
        assert any(
            str(v).endswith(":/models:ro") or (isinstance(v, dict) and v.get("target") == "/models")
            for v in service["volumes"]
        )
    assert sorted(published for published, _ in port_pairs(compose["services"]["attnserve"])) == [
        "50051",
        "8000",
        "8002",
    ]
    gpu = sorted(published for published, _ in port_pairs(compose["services"]["attnserve-gpu"]))
    assert gpu == ["50052", "8001", "8003"]  # beside the CPU service on one host


def test_compose_environment_sets_every_server_setting_with_its_default(compose):
    """A setting added to the server must be added here too, with the same default."""
    env = environment(compose["services"]["attnserve"])
    expected = {"ATTNSERVE_CONFIG"} | {env_name(f.name) for f in dataclasses.fields(Settings)}
    assert set(env) == expected
    fixed = {"ATTNSERVE_MODEL_REPO": "/models", "ATTNSERVE_HOST": "0.0.0.0", "ATTNSERVE_PORT": str(GRPC_PORT)}
    fixed |= {"ATTNSERVE_METRICS_PORT": str(METRICS_PORT), "ATTNSERVE_PROVIDER": "cpu", "ATTNSERVE_CONFIG": ""}
    fixed |= {"ATTNSERVE_HTTP_PORT": str(HTTP_PORT)}
    defaults = Settings()
    for f in dataclasses.fields(Settings):
        name = env_name(f.name)
        if name in fixed:
            assert env[name] == fixed[name], name
        else:
            # the value the container gets must parse to the server's own default
            from attnserve.server.shared.config_sources import _convert

            assert _convert(f.name, env[name], name) == getattr(defaults, f.name), name
    assert environment(compose["services"]["attnserve-gpu"])["ATTNSERVE_PROVIDER"] == "cuda"


def test_environment_reaches_the_container(compose):
    """``ATTNSERVE_MAX_BATCH_SIZE=8 docker compose up`` changes the server's setting."""
    tuned = resolved_compose({"ATTNSERVE_MAX_BATCH_SIZE": "8", "ATTNSERVE_GRPC_PUBLISH": "127.0.0.1:6000"})
    service = tuned["services"]["attnserve"]
    assert environment(service)["ATTNSERVE_MAX_BATCH_SIZE"] == "8"
    assert any(target == GRPC_PORT and "6000" in published for published, target in port_pairs(service))


def test_stop_grace_period_outlasts_the_server_drain(compose):
    grace = _seconds(compose["services"]["attnserve"]["stop_grace_period"])
    assert grace > Settings().grace_seconds + 2


def test_every_path_named_by_compose_exists(compose):
    for name, service in compose["services"].items():
        if "build" in service:
            context = (DOCKER / service["build"]["context"]).resolve()
            assert context == ROOT, name
            assert (context / service["build"]["dockerfile"]).is_file(), name
            wheelhouse = service["build"]["args"]["WHEELHOUSE"]
            assert (context / wheelhouse).is_dir(), wheelhouse
        for volume in service.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else str(volume).split(":")[0]
            if source.startswith((".", "/")):  # a bind mount, not a named volume
                assert (DOCKER / source).resolve().is_file(), f"{name}: {source}"
            else:
                assert source in compose.get("volumes", {}), f"{name}: named volume {source} not declared"


def _dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` (relative, posix) out of the build context (last match wins)."""
    ignored = False
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/").removeprefix("**/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes) or any(fnmatch.fnmatch(part, pattern) for part in parts):
            ignored = not negate
    return ignored


@pytest.mark.parametrize("flavor", sorted(DOCKERFILES))
def test_every_path_copied_by_the_dockerfile_exists_in_the_build_context(flavor):
    dockerfile = parse_dockerfile(DOCKERFILES[flavor])
    copied = []
    for stage in dockerfile.stages:
        for args in stage.all("COPY"):
            if "--from=" in args:
                continue
            *sources, _dest = args.split()
            copied += [dockerfile.expand(s).rstrip("/") for s in sources]
    assert "docker/healthcheck.py" in copied and "pyproject.toml" in copied
    for source in copied:
        assert (ROOT / source).exists(), f"{DOCKERFILES[flavor].name}: COPY {source}: no such path"
        assert not _dockerignored(source), f"{DOCKERFILES[flavor].name}: COPY {source}: excluded by .dockerignore"
    for left_out in (".git", ".venv", "model-repo", "tests", "server/__pycache__", "attnserve.egg-info"):
        assert _dockerignored(left_out), left_out


@pytest.mark.parametrize("flavor", sorted(DOCKERFILES))
def test_the_stage_that_builds_the_wheel_copies_every_package_of_pyproject(flavor):
    """`pip wheel .` fails on a package-dir missing from the image ("package directory ... does
    not exist"); only a real image build would say so, so check it here."""
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    dockerfile = parse_dockerfile(DOCKERFILES[flavor])
    (stage,) = [s for s in dockerfile.stages if any("pip wheel" in run for run in s.all("RUN"))]
    copied = {args.split()[0].rstrip("/") for args in stage.all("COPY") if "--from=" not in args}
    for package, folder in package_dirs.items():
        assert folder in copied, f"{DOCKERFILES[flavor].name}: {package} ({folder}/) is not copied before `pip wheel`"
        assert not _dockerignored(f"{folder}/__init__.py"), f"{folder}/ is excluded by .dockerignore"
    assert _dockerignored("benchmarks/results/server.json")


def test_every_package_folder_is_listed_for_the_wheel():
    """setuptools installs only the packages pyproject names: a new sub-package left out of the
    list works from the editable checkout and is missing from the wheel, so the image's server
    dies on import (a CI run found `attnserve.server.kserve` missing that way)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    on_disk = set()
    for package, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            on_disk.add(".".join([package, *relative.parts]))
    assert on_disk - listed == set(), (
        f"packages missing from pyproject's [tool.setuptools] packages: {sorted(on_disk - listed)}"
    )
    # data-only packages (no __init__.py, e.g. the bundled models) are listed so that setuptools
    # ships their package-data without warning that an importable folder "would be ignored"
    data_only = {name for name in listed - on_disk if name in setuptools["package-data"]}
    assert listed - on_disk - data_only == set(), f"pyproject lists packages with no folder: {sorted(listed - on_disk)}"
    for name in data_only:
        parent, leaf = name.rsplit(".", 1)
        assert (ROOT / setuptools["package-dir"][parent] / leaf).is_dir(), name


@pytest.mark.parametrize("flavor", sorted(DOCKERFILES))
def test_runtime_stage_is_non_root_exposes_ports_probes_health_and_runs_the_server(flavor):
    dockerfile = parse_dockerfile(DOCKERFILES[flavor])
    assert len(dockerfile.stages) >= 2, "multi-stage: the build stage keeps torch out of the runtime"
    assert all(stage.base.startswith("${") for stage in dockerfile.stages), "every stage's base is a build ARG"
    runtime = dockerfile.stages[-1]
    user = runtime.all("USER")[-1].split(":")[0]
    assert user not in ("root", "0")
    assert sorted(int(p) for p in " ".join(runtime.all("EXPOSE")).split()) == [HTTP_PORT, METRICS_PORT, GRPC_PORT]
    (health,) = runtime.all("HEALTHCHECK")
    assert health.split("CMD", 1)[1].strip() == '["python", "/opt/attnserve/healthcheck.py"]'
    assert runtime.exec_form("ENTRYPOINT") == ["attnserve-server"]
    env = runtime.env()
    assert env["ATTNSERVE_HOST"] == "0.0.0.0" and env["ATTNSERVE_MODEL_REPO"] == "/models"
    assert (env["ATTNSERVE_PORT"], env["ATTNSERVE_METRICS_PORT"]) == (str(GRPC_PORT), str(METRICS_PORT))
    assert env["ATTNSERVE_HTTP_PORT"] == str(HTTP_PORT)
    assert env["ATTNSERVE_PROVIDER"] == {"cpu": "cpu", "cuda": "cuda"}[flavor]
    assert not any("torch" in args for args in runtime.all("RUN") + runtime.all("COPY"))


def test_cuda_image_uses_cuda_13_and_cudnn_9():
    dockerfile = parse_dockerfile(DOCKERFILES["cuda"])
    base = dockerfile.args["BASE_IMAGE"]
    assert re.match(r"nvidia/cuda:13\.\d+\.\d+-cudnn-runtime-", base), base


def test_image_requirements_follow_pyproject_with_the_right_onnxruntime():
    cpu = requirements.requirements("onnxruntime", [])
    cuda = requirements.requirements("onnxruntime-gpu", [])
    build = requirements.requirements("onnxruntime", ["export"])
    assert cpu[0].startswith("onnxruntime>=") and cuda[0].startswith("onnxruntime-gpu>=")
    assert cpu[1:] == cuda[1:]
    assert not any(r.startswith(("torch", "onnxruntime-gpu")) for r in cpu)
    assert any(r.startswith("torch==") for r in build) and set(cpu) <= set(build)
    assert any(r.startswith("grpcio-health-checking") for r in cpu)


def test_envoy_balances_over_the_attnserve_service_with_grpc_health_checks(compose):
    envoy = yaml.safe_load((DOCKER / "envoy.yaml").read_text())
    (listener,) = envoy["static_resources"]["listeners"]
    published = {target for _, target in port_pairs(compose["services"]["envoy"])}
    assert listener["address"]["socket_address"]["port_value"] in published
    (cluster,) = envoy["static_resources"]["clusters"]
    assert cluster["type"] == "STRICT_DNS"  # every replica's address, re-resolved
    (endpoint,) = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
    address = endpoint["endpoint"]["address"]["socket_address"]
    assert (address["address"], address["port_value"]) == ("attnserve", GRPC_PORT)
    options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in options["explicit_http_config"]  # gRPC upstream
    assert "grpc_health_check" in cluster["health_checks"][0]


def test_prometheus_scrapes_every_attnserve_replica(compose):
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    targets = {
        (name, sd["port"]) for job in config["scrape_configs"] for sd in job["dns_sd_configs"] for name in sd["names"]
    }
    assert targets == {("attnserve", METRICS_PORT), ("attnserve-gpu", METRICS_PORT)}
    assert set(compose["services"]) >= {name for name, _ in targets}


def test_base_image_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(DOCKER / "base-image.sh")], check=True, timeout=30)
    assert os.access(DOCKER / "base-image.sh", os.X_OK)


def _probe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(DOCKER / "healthcheck.py"), *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_container_command_and_healthcheck_against_a_live_server(compose, tiny_repo):
    """The image's ENTRYPOINT with the compose service's environment, run on this host (only
    the addresses and the model repository changed), answers the HEALTHCHECK's probe, serves
    metrics, and exits 0 on SIGTERM."""
    runtime = parse_dockerfile(DOCKERFILES["cpu"]).stages[-1]
    command = runtime.exec_form("ENTRYPOINT") + (runtime.exec_form("CMD") if runtime.all("CMD") else [])
    command[0] = str(BIN / command[0])
    port, http_port, metrics_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    env |= {k: v for k, v in runtime.env().items() if k.startswith(("ATTNSERVE_", "PYTHON"))}
    env |= environment(compose["services"]["attnserve"])
    env |= {
        "ATTNSERVE_HOST": "127.0.0.1",
        "ATTNSERVE_PORT": str(port),
        "ATTNSERVE_METRICS_PORT": str(metrics_port),
        "ATTNSERVE_HTTP_PORT": str(http_port),
        "ATTNSERVE_MODEL_REPO": str(tiny_repo),
        "ATTNSERVE_THREADS": "1",
        "ATTNSERVE_PREPROCESS_THREADS": "1",
    }
    # Before the server is up, the probe fails (Docker counts that against `retries`).
    down = _probe(env)
    assert down.returncode == 1 and "UNREACHABLE" in down.stdout
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        log = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                raise AssertionError("server exited during start-up:\n" + "".join(log))
            log.append(line)
            if "serving 1 model(s)" in line:
                break
        else:
            raise AssertionError("server did not start in 90 s:\n" + "".join(log))
        up = _probe(env)
        assert up.returncode == 0, up.stdout + up.stderr
        assert up.stdout.strip() == f"127.0.0.1:{port} (server): SERVING"
        assert _probe(env, "--service", "digits").returncode == 0
        assert _probe(env, "--service", "no-such-model").returncode == 1
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as reply:
            assert b"attnserve_" in reply.read()
        # the HTTP port the compose file publishes: KServe v2 readiness (the Kubernetes probe)
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=10) as reply:
            assert reply.status == 200
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        proc.stderr.close()
    assert code == 0
    assert _probe(env).returncode == 1


def test_healthcheck_default_address_follows_the_server_environment(monkeypatch):
    monkeypatch.setenv("ATTNSERVE_HOST", "0.0.0.0")
    monkeypatch.setenv("ATTNSERVE_PORT", "7001")
    assert healthcheck.default_address() == "127.0.0.1:7001"
    monkeypatch.setenv("ATTNSERVE_HOST", "10.1.2.3")
    assert healthcheck.default_address() == "10.1.2.3:7001"
    monkeypatch.delenv("ATTNSERVE_HOST")
    monkeypatch.delenv("ATTNSERVE_PORT")
    assert healthcheck.default_address() == "127.0.0.1:50051"


def test_prometheus_config_passes_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian: prometheus)")
    proc = subprocess.run(
        [promtool, "check", "config", str(DOCKER / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
