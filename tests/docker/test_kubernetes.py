"""The Kubernetes manifests (docker/kubernetes), validated offline.

The Deployment and Service against the Kubernetes API schemas (kubernetes-validate, strict:
an unknown field is an error); the KServe ServingRuntime and InferenceService against
KServe's CRD schemas vendored in docker/kubernetes/schemas (made strict the same way).
Then what a schema cannot see: the container's ports are the image's, its probes answer
200 from a live server started with the container's settings, and the KServe runtime's
arguments parse with the server's own parser. No cluster is involved.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from attnserve.server.entry.cli import build_parser
from attnserve.server.shared.config_sources import resolve_settings

from .conftest import DOCKER, DOCKERFILES, GRPC_PORT, HTTP_PORT, METRICS_PORT, free_port, parse_dockerfile

kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")

MANIFESTS = DOCKER / "kubernetes"
SCHEMAS = MANIFESTS / "schemas"
BIN = Path(sys.executable).parent


def _documents(name: str) -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc}


def _strict(schema):
    """Kubernetes prunes unknown fields of a CRD object silently; here they are errors (a typo shows)."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _crd_errors(doc: dict, schema_file: str) -> list[str]:
    crd = json.loads((SCHEMAS / schema_file).read_text())
    assert doc["apiVersion"] == f"{crd['group']}/{crd['version']}" and doc["kind"] == crd["kind"]
    schema = _strict(crd["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta is checked by the API server itself
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


@pytest.fixture(scope="module")
def plain() -> dict[str, dict]:
    return _documents("attnserve.yaml")


@pytest.fixture(scope="module")
def kserve() -> dict[str, dict]:
    return _documents("kserve.yaml")


def test_deployment_and_service_pass_the_kubernetes_schemas(plain):
    assert set(plain) == {"ConfigMap", "Deployment", "Service"}
    version = kubernetes_validate.latest_version()
    for doc in plain.values():
        kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError
    broken = copy.deepcopy(plain["Deployment"])
    broken["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def test_deployment_ports_are_the_images_and_the_service_routes_them(plain):
    (container,) = plain["Deployment"]["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": GRPC_PORT, "http": HTTP_PORT, "metrics": METRICS_PORT}
    runtime = parse_dockerfile(DOCKERFILES["cpu"]).stages[-1]
    assert sorted(int(p) for p in " ".join(runtime.all("EXPOSE")).split()) == sorted(ports.values())
    uid = re.search(r"--uid (\d+)", DOCKERFILES["cpu"].read_text()).group(1)  # the image's user
    assert plain["Deployment"]["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)
    service = plain["Service"]["spec"]
    assert service["selector"] == plain["Deployment"]["spec"]["selector"]["matchLabels"]
    assert {p["targetPort"] for p in service["ports"]} == set(ports)
    grace = plain["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert grace > float(env["ATTNSERVE_GRACE_SECONDS"])  # the drain finishes before SIGKILL


def test_every_replica_pulls_the_same_models_before_the_server_starts(plain):
    """The init container runs the image's pull stage with the ConfigMap's lists into the pod's
    models volume, which the server mounts read-only where the image serves models from."""
    pod = plain["Deployment"]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (server,) = pod["containers"]
    pull_stage = parse_dockerfile(DOCKERFILES["cpu"]).stage("pull")
    assert init["image"] == "attnserve:pull" and pull_stage.exec_form("ENTRYPOINT") == ["pull-models"]
    assert init["envFrom"] == [{"configMapRef": {"name": plain["ConfigMap"]["metadata"]["name"]}}]
    lists = plain["ConfigMap"]["data"]
    assert set(lists) == {"ATTNSERVE_LANGUAGES", "ATTNSERVE_PULL_MODELS", "ATTNSERVE_ARGOS_INDEX"}
    assert lists["ATTNSERVE_LANGUAGES"] or lists["ATTNSERVE_PULL_MODELS"]  # an empty volume serves nothing
    script = (DOCKERFILES["cpu"].parent / "pull-models.sh").read_text()
    assert all(name in script for name in lists)
    mounts = {m["name"]: m for m in init["volumeMounts"]}
    served = {m["name"]: m for m in server["volumeMounts"]}
    assert mounts["models"]["mountPath"] == served["models"]["mountPath"] == pull_stage.env()["ATTNSERVE_MODEL_REPO"]
    assert served["models"]["readOnly"] is True and not mounts["models"].get("readOnly")
    runtime = parse_dockerfile(DOCKERFILES["cpu"]).stages[-1]
    assert runtime.env()["ATTNSERVE_MODEL_REPO"] == served["models"]["mountPath"]
    volumes = {v["name"] for v in pod["volumes"]}
    assert {m["name"] for m in init["volumeMounts"]} <= volumes


def test_probes_answer_from_a_live_server_with_the_containers_settings(plain, tiny_repo):
    """The image's entrypoint with the container's environment (only addresses and the model
    repository changed): every probe path of the manifest answers 200 on the port it names."""
    (container,) = plain["Deployment"]["spec"]["template"]["spec"]["containers"]
    runtime = parse_dockerfile(DOCKERFILES["cpu"]).stages[-1]
    ports = {p["name"]: free_port() for p in container["ports"]}
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    env |= {k: v for k, v in runtime.env().items() if k.startswith("ATTNSERVE_")}
    env |= {e["name"]: e["value"] for e in container["env"]}
    env |= {
        "ATTNSERVE_HOST": "127.0.0.1",
        "ATTNSERVE_PORT": str(ports["grpc"]),
        "ATTNSERVE_HTTP_PORT": str(ports["http"]),
        "ATTNSERVE_METRICS_PORT": str(ports["metrics"]),
        "ATTNSERVE_MODEL_REPO": str(tiny_repo),
        "ATTNSERVE_THREADS": "1",
        "ATTNSERVE_PREPROCESS_THREADS": "1",
    }
    proc = subprocess.Popen([str(BIN / "attnserve-server")], env=env, stderr=subprocess.PIPE, text=True)
    try:
        log, deadline = [], time.monotonic() + 90
        while time.monotonic() < deadline and not any("serving 1 model(s)" in line for line in log):
            line = proc.stderr.readline()
            assert line, "server exited during start-up:\n" + "".join(log)
            log.append(line)
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container[kind]["httpGet"]
            url = f"http://127.0.0.1:{ports[probe['port']]}{probe['path']}"
            with urllib.request.urlopen(url, timeout=10) as reply:
                assert reply.status == 200, (kind, url)
        annotations = plain["Deployment"]["spec"]["template"]["metadata"]["annotations"]
        assert int(annotations["prometheus.io/port"]) == METRICS_PORT
        url = f"http://127.0.0.1:{ports['metrics']}{annotations['prometheus.io/path']}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            assert b"attnserve_inflight_requests" in reply.read()
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
        proc.stderr.close()


def test_kserve_runtime_and_inference_service_pass_kserves_schemas(kserve):
    assert set(kserve) == {"ServingRuntime", "InferenceService"}
    assert _crd_errors(kserve["ServingRuntime"], "serving.kserve.io_servingruntimes.v1alpha1.json") == []
    assert _crd_errors(kserve["InferenceService"], "serving.kserve.io_inferenceservices.v1beta1.json") == []
    typo = copy.deepcopy(kserve["InferenceService"])
    typo["spec"]["predictor"]["model"]["storageURI"] = typo["spec"]["predictor"]["model"].pop("storageUri")
    assert any("storageURI" in e for e in _crd_errors(typo, "serving.kserve.io_inferenceservices.v1beta1.json"))


def test_kserve_runtime_serves_the_inference_services_format_with_the_servers_own_flags(kserve):
    runtime, isvc = kserve["ServingRuntime"]["spec"], kserve["InferenceService"]["spec"]["predictor"]["model"]
    assert isvc["runtime"] == kserve["ServingRuntime"]["metadata"]["name"]
    assert isvc["modelFormat"]["name"] in {f["name"] for f in runtime["supportedModelFormats"]}
    assert isvc["protocolVersion"] in runtime["protocolVersions"] and "v2" in runtime["protocolVersions"]
    (container,) = runtime["containers"]
    assert container["name"] == "kserve-container"  # the name KServe looks for
    settings = resolve_settings(build_parser().parse_args(container["args"]), environ={})
    assert str(settings.model_repo) == "/mnt/models"  # where KServe puts storageUri
    assert settings.host == "0.0.0.0"
    assert [p["containerPort"] for p in container["ports"]] == [settings.http_port]
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": settings.http_port}
    annotations = kserve["ServingRuntime"]["metadata"]["annotations"]
    assert int(annotations["prometheus.kserve.io/port"]) == settings.metrics_port
    assert re.match(r"^(pvc|s3|gs|https?)://", isvc["storageUri"])
