"""The characters each client has had translated this month and its quota
(``server/service/usage.py``) on a clock the tests move: a request counts once answered, its
characters held while it runs, a quota refuses the request that would pass it and renews with the
month; the counts kept in the state store are one row per client whichever process added to it,
and survive a restart. Through DeepL's client and the other doors: tests/server/http/test_deepl_usage.py."""

from __future__ import annotations

import asyncio
import calendar

import pytest

from attnserve.server.service.usage import Usage, month_end, previous_month
from attnserve.server.shared.config import ConfigError
from attnserve.server.shared.config_sources import resolve_settings
from attnserve.server.shared.errors import MonthlyQuotaExceeded
from attnserve.server.shared.security import character_quotas, key_digest, load_tokens
from attnserve.server.state.database import SqliteDatabase
from attnserve.server.state.usage import UsageStore

NOVEMBER = calendar.timegm((2026, 11, 29, 12, 0, 0))
ALICE, BOB = f"key:{key_digest('alice')}", "ip:10.0.0.7"


class Clock:
    def __init__(self, now: float = NOVEMBER) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def usage(clock: Clock | None = None, **settings) -> Usage:
    return Usage(resolve_settings(environ={}, **settings), clock or Clock())


def translated(counts: Usage, client: str, characters: int) -> None:
    with counts.charge(client, characters) as charge:
        charge.answered()


def refusal(counts: Usage, client: str, characters: int) -> str:
    with pytest.raises(MonthlyQuotaExceeded) as refused:
        translated(counts, client, characters)
    return str(refused.value)


def test_a_request_counts_once_answered_and_a_failed_one_costs_nothing():
    counts = usage()
    translated(counts, ALICE, 21)
    with pytest.raises(RuntimeError), counts.charge(ALICE, 500):
        raise RuntimeError("the model failed")
    with counts.charge(ALICE, 7):  # never answered: a stream closed before its end
        pass
    translated(counts, BOB, 4)
    assert (counts.used(ALICE), counts.used(BOB), counts.used("ip:10.0.0.8")) == (21, 4, 0)
    assert counts.limit(ALICE) == 0  # no quota: every request passes
    translated(counts, ALICE, 10**9)
    assert counts.used(ALICE) == 10**9 + 21


def test_a_quota_refuses_the_request_that_would_pass_it_and_renews_with_the_month():
    clock = Clock()
    counts = usage(clock, characters_per_month=100)
    translated(counts, ALICE, 60)
    message = refusal(counts, ALICE, 41)
    assert message == (
        "quota exceeded: 60 of this client's 100 characters a month (--characters-per-month) are used; "
        "this request has 41; the quota renews on 2026-12-01 (UTC)"
    )
    with counts.charge(ALICE, 30) as charge:  # in flight: its characters count as used meanwhile
        refusal(counts, ALICE, 11)
        charge.answered()
    translated(counts, ALICE, 10)
    assert counts.used(ALICE) == 100
    assert "100 of this client's 100 characters" in refusal(counts, ALICE, 0)  # reached: even nothing more
    translated(counts, BOB, 100)  # every client has its own
    clock.now = calendar.timegm((2026, 12, 1, 0, 0, 0))
    assert counts.used(ALICE) == 0
    translated(counts, ALICE, 100)


def test_a_token_has_a_quota_of_its_own_in_the_token_file(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("alice requests_per_minute=60 characters_per_month=10\nbob characters_per_month=0\ncarol\n")
    settings = dict(auth_token_file=str(tokens), characters_per_month=1000)
    assert character_quotas(resolve_settings(environ={}, **settings)) == {key_digest("alice"): 10, key_digest("bob"): 0}
    counts = usage(**settings)
    assert "(characters_per_month of its token)" in refusal(counts, ALICE, 11)
    translated(counts, f"key:{key_digest('bob')}", 5000)  # 0: unlimited for that token
    assert counts.limit(f"key:{key_digest('carol')}") == counts.limit(BOB) == 1000
    tokens.write_text("first-token-0123456789\nsecret-token-0123456789 characters_per_month=lots\n")
    with pytest.raises(ConfigError, match="line 2: .* is not requests_per_minute=N, .* characters_per_month=N"):
        load_tokens(resolve_settings(environ={}, auth_token_file=str(tokens)))


def test_months_end_at_the_first_second_of_the_next_utc():
    assert month_end(NOVEMBER) == calendar.timegm((2026, 12, 1, 0, 0, 0))
    assert month_end(calendar.timegm((2026, 12, 31, 23, 59, 59))) == calendar.timegm((2027, 1, 1, 0, 0, 0))
    assert (previous_month("2027-01"), previous_month("2026-11")) == ("2026-12", "2026-10")


def test_the_store_holds_one_count_per_client_whichever_process_added_and_survives_a_restart(tmp_path):
    """Two processes on one state folder (--workers 2) add to one row; a third started after
    both stopped (a restart) reads it; /v2/usage's report reads the store first."""

    def process() -> Usage:
        counts = usage(characters_per_month=100)
        counts.keep_in(UsageStore(SqliteDatabase(tmp_path / "state.sqlite3")))
        return counts

    async def run() -> tuple[int, int, tuple[int, int]]:
        first, second = process(), process()
        await first.start()
        await second.start()
        translated(first, ALICE, 30)
        translated(second, ALICE, 25)
        assert first.used(ALICE) == 30  # not written yet: nothing waits on the store per request
        reported = await first.report(ALICE)  # its own written, the other's read back once written
        await second.sync()
        await first.sync()
        seen = first.used(ALICE), second.used(ALICE)
        translated(second, ALICE, 5)
        for counts in (first, second):
            await counts.stop()
            counts.close()
        restarted = process()
        await restarted.start()
        try:
            return *seen, await restarted.report(ALICE), reported
        finally:
            await restarted.stop()
            restarted.close()

    first_saw, second_saw, after_restart, reported = asyncio.run(run())
    assert reported == (30, 100)
    assert first_saw == second_saw == 55
    assert after_restart == (60, 100)
