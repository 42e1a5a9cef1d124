"""The state store's backends, for tests that run on both: SQLite in a temporary folder, and a
PostgreSQL server the session starts (skipped, with the reason, where none can be started)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from attnserve.server.state import open_database
from tests.support import postgres


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    why = postgres.missing()
    if why:
        pytest.skip(why)
    with postgres.postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request, tmp_path) -> str:
    """ "" (SQLite in ``tmp_path``) or a fresh PostgreSQL database of the session's server."""
    if request.param == "sqlite":
        return ""
    import psycopg

    url = request.getfixturevalue("postgres_url")
    name = f"t{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def database(state_url, tmp_path):
    db = open_database(state_url, tmp_path)
    yield db
    db.close()
