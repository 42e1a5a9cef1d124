"""The request-rate table the processes of ``--workers N`` share (``server/shared/rate_table.py``):
processes counting one client at once admit exactly its rate, a full set forgets its least recently
seen client, and a process killed while it holds the table leaves it usable. Through a live
two-worker server: tests/reliability/test_workers.py. The counting rules themselves run on both
stores in tests/server/test_rates.py."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from attnserve.server.shared.errors import RateLimited
from attnserve.server.shared.rate_table import WAYS, ClientTable, create_table
from attnserve.server.shared.rates import Caller, RateLimiter, rates_of
from attnserve.server.shared.security import key_digest


@pytest.fixture
def table_file():
    path, key = create_table(1000)
    yield path, key
    os.unlink(path)


def _admit_for_half_a_second(path: str, key: bytes, start, results) -> None:
    limits = RateLimiter(rates_of({"requests_per_hour": 100}, str), clients=ClientTable(path, key))
    start.wait(30)
    admitted, tries, until = 0, 0, time.monotonic() + 0.5
    while time.monotonic() < until:
        tries += 1
        try:
            limits.admit(Caller("", "10.0.0.9"))
            admitted += 1
        except RateLimited:
            pass
    results.put((admitted, tries))


def test_processes_counting_one_client_at_once_admit_exactly_its_rate(table_file):
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_admit_for_half_a_second, args=(*table_file, start, results)) for _ in range(3)]
    for proc in procs:
        proc.start()
    start.set()
    counts = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(30)
    assert sum(admitted for admitted, _ in counts) == 100  # one refills every 36 s
    assert all(tries > 100 for _, tries in counts)  # each tried more than the rate, at once


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def one_set(clock: Clock, **overrides: dict) -> RateLimiter:
    """A limiter of 1 a minute on a table of one set of WAYS slots."""
    path, key = create_table(WAYS // 2)
    clients = ClientTable(path, key)
    os.unlink(path)
    own = {key_digest(token): rates_of(rates, str) for token, rates in overrides.items()}
    return RateLimiter(rates_of({"requests_per_minute": 1}, str), own, clock, clients=clients)


def test_a_full_set_forgets_its_least_recently_seen_client():
    clock = Clock()
    limits = one_set(clock)
    callers = [Caller("", f"10.0.0.{i}") for i in range(WAYS + 1)]
    for caller in callers[:WAYS]:
        limits.admit(caller)
        clock.now += 1
    with pytest.raises(RateLimited):
        limits.admit(callers[1])  # kept: its minute is spent
    limits.admit(callers[WAYS])  # one more than the set holds: the least recently seen is forgotten
    limits.admit(callers[0])  # so it starts afresh
    with pytest.raises(RateLimited):
        limits.admit(callers[WAYS - 1])  # the others are kept


def test_a_full_set_gives_a_new_client_a_refilled_slot_before_forgetting_a_count():
    clock = Clock()
    limits = one_set(clock, hourly={"requests_per_hour": 1})
    hourly = Caller(key_digest("hourly"), "10.0.0.1")
    limits.admit(hourly)  # the least recently seen, and still counting for an hour
    for i in range(WAYS - 1):
        clock.now += 1
        limits.admit(Caller("", f"10.0.0.{i + 2}"))
    clock.now += 60  # every minute's bucket refilled
    limits.admit(Caller("", "10.0.1.1"))
    with pytest.raises(RateLimited):
        limits.admit(hourly)


def _hold_the_table(path: str, key: bytes, held) -> None:
    table = ClientTable(path, key)
    with table.state("ip:10.0.0.1", time.monotonic()):
        held.set()
        time.sleep(120)


def test_a_process_killed_while_it_holds_the_table_leaves_it_usable(table_file):
    ctx = multiprocessing.get_context("spawn")
    held = ctx.Event()
    proc = ctx.Process(target=_hold_the_table, args=(*table_file, held))
    proc.start()
    assert held.wait(60)
    proc.kill()
    proc.join(30)
    limits = RateLimiter(rates_of({"requests_per_minute": 1}, str), clients=ClientTable(*table_file))
    started = time.monotonic()
    limits.admit(Caller("", "10.0.0.1"))
    with pytest.raises(RateLimited):
        limits.admit(Caller("", "10.0.0.1"))
    assert time.monotonic() - started < 5
