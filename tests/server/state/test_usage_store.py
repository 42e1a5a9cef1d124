"""The monthly character counts' table (``server/state/usage.py``) on SQLite and PostgreSQL: what
each process adds goes into one row per client and month, another process reads what was written
since it last looked, and months gone by are deleted."""

from __future__ import annotations

from attnserve.server.state.usage import UsageStore


def test_counts_add_up_in_one_row_per_client_and_month_and_old_months_go(database):
    store = UsageStore(database)
    store.add({("key:alice", "2026-11"): 30, ("ip:10.0.0.7", "2026-11"): 5, ("key:alice", "2026-10"): 7}, now=100.0)
    store.add({("key:alice", "2026-11"): 25}, now=200.0)  # another worker's batch for the same client
    assert store.changed("2026-11", since=0.0) == {"key:alice": 55, "ip:10.0.0.7": 5}
    assert store.changed("2026-11", since=150.0) == {"key:alice": 55}  # only what was written since
    assert store.changed("2026-10", since=0.0) == {"key:alice": 7}
    assert store.forget(before="2026-11") == 1
    assert store.changed("2026-10", since=0.0) == {}
    assert UsageStore(database).changed("2026-11", since=0.0)["key:alice"] == 55  # opened again: kept
