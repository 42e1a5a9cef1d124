"""Helpers of the docker tests: the compose file as compose resolves it, the Dockerfiles'
instructions, free ports, and a tiny model repository for host-side runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILE = DOCKER / "docker-compose.yml"
DOCKERFILES = {"cpu": DOCKER / "Dockerfile", "cuda": DOCKER / "Dockerfile.cuda"}
GRPC_PORT, HTTP_PORT, METRICS_PORT = 50051, 8000, 8002  # inside the container


def compose_command() -> list[str] | None:
    """``docker compose`` (v2) when the docker CLI has the plugin, else ``docker-compose`` (v1), else None."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


_INTERPOLATION = re.compile(r"\$\{(\w+)(?:(:?-)([^}]*))?\}")


def interpolate(value, environ: dict[str, str]):
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}`` over a loaded YAML tree."""
    if isinstance(value, dict):
        return {k: interpolate(v, environ) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, environ) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        name, op, default = m.group(1), m.group(2), m.group(3) or ""
        if op == ":-":
            return environ.get(name) or default
        if op == "-":
            return environ.get(name, default)
        return environ.get(name, "")

    return _INTERPOLATION.sub(sub, value)


PROFILES = ("gpu", "monitoring", "scale")


def resolved_compose(environ: dict[str, str] | None = None, profiles: tuple[str, ...] = PROFILES) -> dict:
    """The compose file after interpolation and YAML merges: ``compose config`` where a compose
    CLI exists (it also validates the file), else PyYAML plus :func:`interpolate`. Every profile
    is enabled: v2's ``config`` leaves out the services of the others (v1 lists all)."""
    environ = {k: v for k, v in (environ or {}).items()}
    cmd = compose_command()
    if cmd is None:
        return interpolate(yaml.safe_load(COMPOSE_FILE.read_text()), environ)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTNSERVE_", "ENVOY_", "PROMETHEUS_"))}
    env.update(environ)
    args = [*cmd, "-f", str(COMPOSE_FILE)]
    for profile in profiles:
        args += ["--profile", profile]
    proc = subprocess.run([*args, "config"], capture_output=True, text=True, timeout=120, env=env, cwd=DOCKER)
    assert proc.returncode == 0, f"{' '.join(args)} config failed:\n{proc.stderr}"
    return yaml.safe_load(proc.stdout)


def port_pairs(service: dict) -> list[tuple[str, int]]:
    """(published, target) of a service's ports, short ("8002:8002") or long syntax."""
    out = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            out.append((str(port.get("published", "")), int(port["target"])))
        else:
            published, _, target = str(port).rpartition(":")
            out.append((published, int(target.split("/")[0])))
    return out


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, arguments)

    def all(self, instruction: str) -> list[str]:
        return [args for ins, args in self.instructions if ins == instruction]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for args in self.all("ENV"):
            for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', args):
                out[key] = value.strip('"')
        return out

    def exec_form(self, instruction: str) -> list[str]:
        (args,) = self.all(instruction)[-1:]
        return json.loads(args[args.index("[") :])


@dataclass
class Dockerfile:
    path: Path
    args: dict[str, str]  # ARG defaults, global and per stage
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def expand(self, text: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: self.args.get(m.group(1), m.group(0)), text)


def parse_dockerfile(path: Path) -> Dockerfile:
    text = re.sub(
        r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
    )
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        instruction, _, rest = line.strip().partition(" ")
        instruction, rest = instruction.upper(), " ".join(rest.split())
        if instruction == "ARG" and "=" in rest:
            key, value = rest.split("=", 1)
            args[key] = value
        if instruction == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            stages.append(Stage(base=m.group(1), name=m.group(2)))
        elif stages:
            stages[-1].instructions.append((instruction, rest))
    return Dockerfile(path, args, stages)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory) -> Path:
    """A model repository with one tiny random ViT (exported in a couple of seconds)."""
    import torch

    from attnserve.export.modeldir import write_vit_dir
    from attnserve.models import VisionTransformer, ViTConfig

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("docker-repo")
    cfg = ViTConfig(image_size=16, patch_size=8, in_channels=1, num_classes=10, dim=16, depth=1, num_heads=2)
    labels = [str(i) for i in range(10)]
    write_vit_dir(
        VisionTransformer(cfg).eval(), root / "digits", name="digits", labels=labels, preprocessing={"invert": True}
    )
    return root
