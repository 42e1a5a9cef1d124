"""The request-rate buckets (``server/shared/rates.py``) on a clock the tests move, the token
file's per-token rates, the ban of ``--ban-after-refusals`` and the settings: what a client past
``--requests-per-minute`` is told and when it is let in again. Through the doors:
tests/server/http/test_rate_limits.py and test_rate_bans.py."""

from __future__ import annotations

import os

import pytest

from attnserve.server.shared.config import ConfigError
from attnserve.server.shared.config_sources import resolve_settings
from attnserve.server.shared.errors import Banned, RateLimited
from attnserve.server.shared.rate_table import ClientTable, create_table
from attnserve.server.shared.rates import Caller, RateLimiter, address_of, peer_host, rates_of
from attnserve.server.shared.security import key_digest, load_tokens, rate_limiter, token_rates


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limiter(
    clock: Clock, overrides: dict | None = None, ban_after: int = 0, clients=None, **values: int
) -> RateLimiter:
    rates = rates_of(values, lambda name: "--" + name.replace("_", "-"))
    own = {key: rates_of(v, lambda name: "its own") for key, v in (overrides or {}).items()}
    return RateLimiter(rates, own, clock, ban_after=ban_after, ban_seconds=600.0, clients=clients)


@pytest.fixture(params=["one process", "the workers' table"])
def clients(request):
    """Where the buckets are kept: one process's memory (None: the default), or the table the
    processes of --workers N share (rate_table.py), which must count the same."""
    if request.param == "one process":
        yield None
        return
    path, key = create_table(1000)
    table = ClientTable(path, key)
    os.unlink(path)
    yield table
    table.close()


def refusal(limits: RateLimiter, caller: Caller) -> RateLimited:
    with pytest.raises(RateLimited) as refused:
        limits.admit(caller)
    return refused.value


ALICE, BOB = Caller(key_digest("alice"), "10.0.0.1"), Caller(key_digest("bob"), "10.0.0.1")


def test_three_a_minute_lets_three_in_at_once_then_one_every_20_seconds(clients):
    clock = Clock()
    limits = limiter(clock, clients=clients, requests_per_minute=3)
    for _ in range(3):
        limits.admit(ALICE)
    refused = refusal(limits, ALICE)
    assert (refused.limit, refused.period, refused.reason) == (3, "minute", "requests_per_minute")
    assert refused.retry_after == pytest.approx(20.0) and refused.retry_seconds == 20
    assert str(refused) == "too many requests: 3 per minute for this client (--requests-per-minute); retry in 20 s"
    assert refused.status == "RESOURCE_EXHAUSTED" and refused.http_status == 429
    clock.now += 5
    assert refusal(limits, ALICE).retry_after == pytest.approx(15.0)  # a refused request takes nothing
    clock.now += 15
    limits.admit(ALICE)  # one refilled
    assert refusal(limits, ALICE).retry_seconds == 20
    clock.now += 60
    for _ in range(3):  # idle a minute: the bucket is full again, never fuller
        limits.admit(ALICE)
    refusal(limits, ALICE)


def test_clients_have_buckets_of_their_own(clients):
    clock = Clock()
    limits = limiter(clock, clients=clients, requests_per_minute=1)
    limits.admit(ALICE)
    refusal(limits, ALICE)
    limits.admit(BOB)  # another token at the same address
    limits.admit(Caller("", "10.0.0.1"))  # no token: its address
    limits.admit(Caller("", "10.0.0.2"))
    refusal(limits, Caller("", "10.0.0.1"))


def test_a_refusal_names_the_rate_to_wait_longest_for(clients):
    clock = Clock()
    limits = limiter(clock, clients=clients, requests_per_minute=2, requests_per_day=3)
    limits.admit(ALICE)
    limits.admit(ALICE)
    assert refusal(limits, ALICE).reason == "requests_per_minute"
    clock.now += 30
    limits.admit(ALICE)  # the day's third
    clock.now += 60
    refused = refusal(limits, ALICE)  # room in the minute, none in the day: 8 hours until one refills
    assert (refused.reason, refused.period) == ("requests_per_day", "day")
    assert refused.retry_after == pytest.approx(86400 / 3 - 90)
    assert "3 per day for this client (--requests-per-day)" in str(refused)


def test_an_hourly_rate_refuses_once_the_hour_is_spent_whatever_the_minute_allows(clients):
    clock = Clock()
    limits = limiter(clock, clients=clients, requests_per_minute=3, requests_per_hour=4)
    for _ in range(3):
        limits.admit(ALICE)
    clock.now += 60
    limits.admit(ALICE)  # the minute refilled; the hour's 4th
    refused = refusal(limits, ALICE)
    assert (refused.limit, refused.period, refused.reason) == (4, "hour", "requests_per_hour")
    assert refused.retry_after == pytest.approx(840.0)  # one of 4 refills every 15 minutes, the 1st a minute ago
    assert "4 per hour for this client (--requests-per-hour)" in str(refused)
    clock.now += refused.retry_after
    limits.admit(ALICE)


def test_refusals_ban_a_client_for_the_ban_period_whatever_its_rates_allow(clients):
    clock = Clock()
    limits = limiter(clock, clients=clients, ban_after=3, requests_per_minute=1)
    limits.admit(ALICE)
    refusal(limits, ALICE)
    refusal(limits, ALICE)
    banned = refusal(limits, ALICE)  # the 3rd refusal bans
    assert isinstance(banned, Banned) and (banned.reason, banned.retry_seconds) == ("banned", 600)
    assert banned.status == "RESOURCE_EXHAUSTED" and banned.http_status == 429
    assert str(banned) == (
        "too many requests: this client is banned for 600 s after 3 refusals past its request rates "
        "(--ban-after-refusals, --ban-seconds); retry in 600 s"
    )
    limits.admit(BOB)  # another client is not
    clock.now += 120  # the minute's bucket is full again, and still the ban refuses
    assert refusal(limits, ALICE).retry_seconds == 480
    clock.now += 480
    limits.admit(ALICE)  # the ban is over
    refusal(limits, ALICE)  # as LibreTranslate's: refusals not yet forgiven are owed, so one more bans
    assert isinstance(refusal(limits, ALICE), Banned)


def test_one_refusal_is_forgiven_every_ban_period_and_a_banned_request_counts_nowhere(clients):
    clock = Clock()
    limits = limiter(clock, clients=clients, ban_after=2, requests_per_minute=1)
    limits.admit(ALICE)
    assert not isinstance(refusal(limits, ALICE), Banned)
    clock.now += 600  # that refusal is forgiven
    limits.admit(ALICE)
    assert not isinstance(refusal(limits, ALICE), Banned)
    assert isinstance(refusal(limits, ALICE), Banned)  # two within the period ban
    for _ in range(100):  # knocking on during the ban neither lengthens it nor adds refusals
        assert isinstance(refusal(limits, ALICE), Banned)
    clock.now += 600
    limits.admit(ALICE)
    clock.now += 1200  # the ban's refusals are forgiven too
    limits.admit(ALICE)
    assert not isinstance(refusal(limits, ALICE), Banned)


def test_banned_clients_are_forgotten_once_forgiven_and_memory_stays_bounded():
    clock = Clock()
    limits = RateLimiter(rates_of({"requests_per_minute": 1}, str), clock=clock, max_clients=100, ban_after=1)
    for i in range(1000):  # a flood of new addresses, each banned on its first refusal
        caller = Caller("", f"10.1.{i // 250}.{i % 250}")
        limits.admit(caller)
        assert isinstance(refusal(limits, caller), Banned)
    assert len(limits.clients) == 100
    clock.now += 600  # every ban over, every refusal forgiven: each is forgotten as the next request passes it
    limits.admit(BOB)
    assert len(limits.clients) == 1


def test_a_token_with_rates_of_its_own_gets_them_and_zero_is_unlimited(clients):
    clock = Clock()
    limits = limiter(
        clock,
        {ALICE.key: {"requests_per_minute": 5}, BOB.key: {"requests_per_minute": 0}},
        clients=clients,
        requests_per_minute=1,
    )
    for _ in range(5):
        limits.admit(ALICE)
    assert "5 per minute for this client (its own)" in str(refusal(limits, ALICE))
    for _ in range(100):
        limits.admit(BOB)
    carol = Caller(key_digest("carol"), "10.0.0.1")
    limits.admit(carol)
    refusal(limits, carol)


def test_ipv6_clients_are_counted_by_their_64_and_mapped_ipv4_as_ipv4(clients):
    assert address_of("2001:db8:1:2:aaaa::1") == address_of("2001:db8:1:2:bbbb::7") == "2001:db8:1:2::/64"
    assert address_of("2001:db8:1:3::1") == "2001:db8:1:3::/64"
    assert address_of("::ffff:192.0.2.7") == address_of("192.0.2.7") == "192.0.2.7"
    assert address_of("fe80::1%eth0") == "fe80::/64"
    assert address_of(None) == "-"
    clock = Clock()
    limits = limiter(clock, clients=clients, requests_per_minute=1)
    limits.admit(Caller("", "2001:db8::1"))
    refusal(limits, Caller("", "2001:db8::2"))  # the same /64


def test_grpc_peers_name_their_host():
    assert peer_host("ipv4:10.0.0.7:51022") == "10.0.0.7"
    assert peer_host("ipv6:[::1]:51022") == "::1"
    assert peer_host("ipv6:%5B2001:db8::1%5D:443") == "2001:db8::1"
    assert peer_host("unix:/run/attnserve.sock") == "unix:/run/attnserve.sock"


def test_clients_are_forgotten_once_refilled_and_memory_stays_bounded():
    clock = Clock()
    limits = RateLimiter(rates_of({"requests_per_minute": 2}, str), clock=clock, max_clients=100)
    for i in range(1000):  # a flood of new addresses
        limits.admit(Caller("", f"10.1.{i // 250}.{i % 250}"))
    assert len(limits.clients) == 100
    limits.admit(ALICE)
    clock.now += 31  # every bucket refilled: each is forgotten as the next request passes it
    limits.admit(BOB)
    assert len(limits.clients) == 1


def test_the_token_file_gives_tokens_rates_of_their_own(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(
        "# the team's keys\n"
        "alice-key-0123456789\n"
        "\n"
        "bob-key-0123456789   requests_per_minute=600\trequests_per_day=0   # a partner\n"
        "  carol-key-012345678 requests_per_day=10000\n"
        "dave-key-0123456789 requests_per_hour=100\n"
    )
    settings = resolve_settings(environ={}, auth_token_file=str(tokens), requests_per_minute=60)
    assert load_tokens(settings)[:3] == ["alice-key-0123456789", "bob-key-0123456789", "carol-key-012345678"]
    assert token_rates(settings) == {
        key_digest("bob-key-0123456789"): {"requests_per_minute": 600, "requests_per_day": 0},
        key_digest("carol-key-012345678"): {"requests_per_day": 10000},
        key_digest("dave-key-0123456789"): {"requests_per_hour": 100},
    }
    limits = rate_limiter(settings)
    assert [r.limit for r in limits.rates] == [60]
    assert [(r.limit, r.where) for r in limits.overrides[key_digest("carol-key-012345678")]] == [
        (60, "--requests-per-minute"),
        (10000, "requests_per_day of its token in --auth-token-file"),
    ]
    assert rate_limiter(resolve_settings(environ={}, auth_tokens="alice-key-0123456789")) is None


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("secret-token-0123456789 request_per_minute=5", "'request_per_minute'=5 is not requests_per_minute=N"),
        ("secret-token-0123456789 requests_per_minute=-1", "'requests_per_minute'=-1 is not"),
        ("secret-token-0123456789 requests_per_minute=", "'requests_per_minute'= is not"),
        ("secret-token-0123456789 rpm", "a word with no '=' is not"),
    ],
)
def test_a_bad_line_of_the_token_file_stops_start_up_naming_its_line_not_its_token(tmp_path, line, fragment):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"first-token-0123456789\n{line}\n")
    with pytest.raises(ConfigError, match="line 2: after the token, ") as bad:
        load_tokens(resolve_settings(environ={}, auth_token_file=str(tokens)))
    assert fragment in str(bad.value) and "secret-token" not in str(bad.value)


def test_the_rates_are_settings_from_flags_environment_and_config_file(tmp_path):
    assert resolve_settings(environ={}).requests_per_minute == 0  # unlimited unless set
    env = {"ATTNSERVE_REQUESTS_PER_MINUTE": "60", "ATTNSERVE_REQUESTS_PER_DAY": "5000"}
    settings = resolve_settings(environ=env)
    assert (settings.requests_per_minute, settings.requests_per_day) == (60, 5000)
    config = tmp_path / "server.json"
    config.write_text('{"requests-per-minute": 30}')
    assert resolve_settings(environ={"ATTNSERVE_CONFIG": str(config)}).requests_per_minute == 30
    with pytest.raises(ConfigError, match="requests_per_day: invalid value -1"):
        resolve_settings(environ={"ATTNSERVE_REQUESTS_PER_DAY": "-1"})
    env = {"ATTNSERVE_REQUESTS_PER_HOUR": "600", "ATTNSERVE_BAN_AFTER_REFUSALS": "10", "ATTNSERVE_BAN_SECONDS": "300"}
    settings = resolve_settings(environ=env, requests_per_minute=20)
    assert (settings.requests_per_hour, settings.ban_after_refusals, settings.ban_seconds) == (600, 10, 300.0)
    limits = rate_limiter(settings)
    assert [r.period for r in limits.rates] == ["minute", "hour"]
    assert (limits.ban_after, limits.ban_seconds) == (10, 300.0)
    assert (resolve_settings(environ={}).ban_after_refusals, resolve_settings(environ={}).ban_seconds) == (0, 600.0)
    with pytest.raises(ConfigError, match="ban_seconds: invalid value 0"):
        resolve_settings(environ={"ATTNSERVE_BAN_SECONDS": "0"})
