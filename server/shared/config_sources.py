"""Where settings come from: CLI flags, ``ATTNSERVE_*`` environment variables and an optional
TOML or JSON config file, merged into one :class:`~.config.Settings`.

Precedence: flag > environment > config file > default. Every field is a setting with
a flag (``--max-batch-size``), an environment variable (``ATTNSERVE_MAX_BATCH_SIZE``) and
a config-file key (``max_batch_size``); :func:`settings_table` lists them for docs/cli.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from .config import ConfigError, Settings
from .locations import bundled_model_repo, default_model_repo

ENV_PREFIX = "ATTNSERVE_"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def _convert(name: str, raw: Any, source: str) -> Any:
    """``raw`` (a string from env or CLI, or a JSON/TOML value) as the field's type."""
    f = next(f for f in fields(Settings) if f.name == name)
    kind = f.type if isinstance(f.type, str) else f.type.__name__
    try:
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"not a boolean: {raw!r}")
        if kind == "int":
            if isinstance(raw, float) or isinstance(raw, bool):
                raise ValueError(f"not an integer: {raw!r}")
            return int(str(raw).replace("_", ""))
        if kind == "float":
            return float(raw)
        if kind == "Path":
            return Path(raw)
        return str(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name} (from {source}): {exc}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting, defaulting to "not given" so precedence can be resolved."""
    parser.add_argument(
        "--config", type=Path, default=None, help=f"TOML or JSON settings file (env {ENV_PREFIX}CONFIG)"
    )
    for f in fields(Settings):
        env = env_name(f.name)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        help_text = f"{f.metadata['help']} (env {env}; default {default})".replace("%", "%%")  # argparse formats it
        if f.type in ("bool", bool):
            parser.add_argument(
                _flag(f.name), action=argparse.BooleanOptionalAction, default=None, dest=f.name, help=help_text
            )
        else:
            parser.add_argument(
                _flag(f.name),
                default=None,
                dest=f.name,
                metavar=f.name.upper(),
                help=help_text,
                choices=f.metadata.get("choices"),
            )


def read_config_file(path: Path) -> dict[str, Any]:
    """Settings from a ``.toml`` or ``.json`` file (keys are field names; dashes allowed)."""
    suffix = Path(path).suffix.lower()
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    try:
        if suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                raise ConfigError(f"config file {path}: TOML needs Python 3.11+; use JSON") from None
            data = tomllib.loads(text)
            data = data.get("server", data)  # either flat or under [server]
        else:
            data = json.loads(text)
    except ConfigError:
        raise
    except ValueError as exc:
        if suffix == ".toml":
            raise ConfigError(f"config file {path}: not valid TOML: {exc}") from None
        other = "" if suffix in (".json", "") else f" (a {suffix} file is read as JSON; settings are TOML or JSON)"
        raise ConfigError(f"config file {path}: not valid JSON: {exc}{other}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a table/object of settings")
    known = {f.name for f in fields(Settings)}
    out = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(f"config file {path}: unknown setting {key!r}")
        out[name] = _convert(name, value, f"config file {path}")
    return out


def resolve_settings(
    args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None, **overrides: Any
) -> Settings:
    """Merge default < config file < environment < flags (< ``overrides``, for tests)."""
    environ = os.environ if environ is None else environ
    given = vars(args) if args is not None else {}
    values: dict[str, Any] = {}
    config_path = given.get("config") or environ.get(ENV_PREFIX + "CONFIG")
    if config_path:
        values.update(read_config_file(Path(config_path)))
    for f in fields(Settings):
        if env_name(f.name) in environ:
            values[f.name] = _convert(f.name, environ[env_name(f.name)], f"env {env_name(f.name)}")
        if given.get(f.name) is not None:
            values[f.name] = _convert(f.name, given[f.name], f"flag {_flag(f.name)}")
    values.update(overrides)
    if "model_repo" not in values and not default_model_repo().exists():
        # no repository named and no ./model-repo: the models that ship with the package
        values["model_repo"] = bundled_model_repo() or default_model_repo()
    return Settings(**values)


def settings_table() -> str:
    """Markdown table of every setting (flag, env, default, meaning) for docs/cli.md."""
    rows = ["| flag | environment | default | what |", "|---|---|---|---|"]
    for f in fields(Settings):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append(f"| `{_flag(f.name)}` | `{env_name(f.name)}` | `{default}` | {f.metadata['help']} |")
    return "\n".join(rows)
