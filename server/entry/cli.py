"""``attnserve-server``: load the model repository and serve it over gRPC until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from ..shared.config import ConfigError
from ..shared.config_sources import add_arguments, resolve_settings
from ..shared.locations import bundled_model_repo

log = logging.getLogger("attnserve.server")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnserve-server",
        description="Serve the models of a repository over gRPC (attnserve.v1, grpc.health.v1, reflection).",
        epilog="Every flag is also an environment variable ATTNSERVE_<FLAG> and a key of the --config file; "
        "precedence: flag > environment > file > default.",
    )
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    # The server's own modules are imported here, not at the top: a file worker is a spawned
    # process that imports the main script again, and for it this module must stay light.
    from ..runtime.registry import RepositoryError
    from ..shared.onnx_sessions import ProviderError
    from ..state.database import StoreUnavailable
    from . import workers
    from .process import serve

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = resolve_settings(args)
    except ConfigError as exc:
        print(f"attnserve-server: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if settings.model_repo == bundled_model_repo():
        log.info("serving the bundled models from %s (no --model-repo and no ./model-repo folder)", settings.model_repo)
    if settings.workers > 1:
        try:
            return workers.run(settings)
        except OSError as exc:
            print(f"attnserve-server: error: {exc}", file=sys.stderr)
            return 1
    try:
        return asyncio.run(serve(settings))
    except (RepositoryError, ProviderError, OSError, ConfigError, StoreUnavailable) as exc:
        print(f"attnserve-server: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
