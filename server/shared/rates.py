"""Per-client request rates: ``--requests-per-minute``, ``--requests-per-hour`` and
``--requests-per-day``, a token's own rates in ``--auth-token-file`` (``TOKEN
requests_per_minute=600``), and the ban of a client refused again and again (``--ban-after-refusals``).

A client is its bearer token when the server has tokens (the sha256 the calls carry as
``Call.key``), else its address: an IPv4 address, or an IPv6 address's /64 (one host or one
subscriber's network holds a whole /64, so rotating addresses within it gains nothing). Each rate
is a token bucket (GCRA: one timestamp per client and rate), the algorithm of nginx's
``limit_req`` and Envoy's local rate limit: a bucket holds N requests and refills at N a period,
so a client may send N at once, then one every period / N; a refused request takes nothing from
it, and ``Retry-After`` is exactly when the next one is let in. Over any one period a client gets
at most 2N (N at once and the N that refilled meanwhile); LibreTranslate's moving window allows N.

A ban counts a client's refusals as LibreTranslate's ``--req-flood-threshold`` does: each refusal
adds one, one is forgiven every period (upstream's 10 minutes, here ``--ban-seconds``), and at
``--ban-after-refusals`` the client is refused every counted request for ``--ban-seconds`` (N
refusals within the period always ban).
The count is one more timestamp in the same bucket scheme (it leaks one a period), and the ban's
end another, so a ban costs a banned client nothing but a comparison. A banned request is refused
before the rates and counts in neither them nor the refusals, so a ban ends on time however hard
the client knocks; as upstream's, a client whose ban has ended still owes the refusals not yet
forgiven, so one more refusal soon after bans it again.

A client's state is ``SLOTS`` timestamps: one bucket per period (minute, hour, day, whichever are
set), the refusals' and the ban's end. One server process keeps them in :class:`ClientMemory`,
least recently seen first: a client whose buckets have refilled, refusals been forgiven and ban
ended is dropped as the next request passes it, and past ``MAX_CLIENTS`` the least recently seen
is forgotten (a full bucket and no ban again), so a flood of new addresses costs bounded memory.
The processes of ``--workers N`` share one table instead (``rate_table.py``), so a client gets its
rates whichever worker its connections reach.
"""

from __future__ import annotations

import ipaddress
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import NamedTuple, Protocol

from .errors import Banned, RateLimited

MAX_CLIENTS = 100_000  # clients kept at once (a few hundred bytes each)
# (setting, seconds, the period as LibreTranslate's limiter words it), in the order they are checked
PERIODS = (
    ("requests_per_minute", 60.0, "minute"),
    ("requests_per_hour", 3600.0, "hour"),
    ("requests_per_day", 86400.0, "day"),
)
RATE_NAMES = tuple(name for name, _, _ in PERIODS)
# a client's timestamps: each period's bucket (RATE_NAMES' order), then the refusals', then the ban's end
REFUSALS, BAN = len(PERIODS), len(PERIODS) + 1
SLOTS = len(PERIODS) + 2
_SLOT = {name: i for i, name in enumerate(RATE_NAMES)}


class Rate(NamedTuple):
    limit: int  # requests a period
    seconds: float  # the period
    period: str  # "minute", "hour", "day"
    reason: str  # the setting's name: the metrics' label
    where: str  # where it is set, for the refusal's message


class Caller(NamedTuple):
    """Who sends a call: ``key`` (the sha256 of a valid bearer token, "" without one) and the
    peer's ``address`` (an IP address as the socket reports it)."""

    key: str
    address: str

    @property
    def client(self) -> str:
        return f"key:{self.key}" if self.key else f"ip:{address_of(self.address)}"


def key_of(client: str) -> str:
    """The key (a token's sha256) of a :attr:`Caller.client`, "" for a client known by its address."""
    return client[4:] if client.startswith("key:") else ""


def rates_of(values: Mapping[str, int], where: Callable[[str], str]) -> tuple[Rate, ...]:
    """The rates set in ``values`` (0 = unlimited), each with ``where(setting)`` for its message."""
    return tuple(
        Rate(values[name], seconds, period, name, where(name))
        for name, seconds, period in PERIODS
        if values.get(name, 0) > 0
    )


def address_of(host: str | None) -> str:
    """The address a client is counted by: IPv4 as is (an IPv4-mapped IPv6 address too), IPv6 by
    its /64; anything else (a Unix socket) as given."""
    try:
        ip = ipaddress.ip_address((host or "").split("%", 1)[0])
    except ValueError:
        return host or "-"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


def peer_host(peer: str) -> str:
    """The host of a gRPC peer (``ipv4:10.0.0.7:51022``, ``ipv6:[::1]:51022``, percent-encoded or
    not); a Unix socket's peer as given."""
    scheme, _, rest = urllib.parse.unquote(peer).partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return peer
    return rest.rsplit(":", 1)[0].strip("[]")


class Clients(Protocol):
    """Where the clients' timestamps are kept: :class:`ClientMemory` or ``rate_table.ClientTable``."""

    def state(self, client: str, now: float):
        """A context giving ``client``'s ``SLOTS`` timestamps (0.0 for a client not kept: a full
        bucket, no refusal, no ban) as a list, kept as the caller leaves it."""


class ClientMemory:
    """The clients of one process, least recently seen first, at most ``max_clients``."""

    def __init__(self, max_clients: int = MAX_CLIENTS) -> None:
        self.max_clients = max_clients
        self._full_at: OrderedDict[str, list[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._full_at)

    @contextmanager
    def state(self, client: str, now: float) -> Iterator[list[float]]:
        full_at = self._full_at.pop(client, None) or [0.0] * SLOTS
        self._forget(now)
        self._full_at[client] = full_at
        yield full_at

    def _forget(self, now: float) -> None:
        """Drop the least recently seen clients whose buckets are full again, refusals forgiven and
        ban over (they start afresh the same), and past ``max_clients`` the least recently seen
        whatever its state."""
        while self._full_at:
            client, full_at = next(iter(self._full_at.items()))
            if max(full_at) > now and len(self._full_at) < self.max_clients:
                return
            del self._full_at[client]


class RateLimiter:
    """The buckets of every client, in ``clients`` (this process's :class:`ClientMemory` of at
    most ``max_clients`` unless given); ``clock`` is monotonic seconds. ``ban_after`` refusals
    (0: no ban), less one forgiven every ``ban_seconds``, ban a client for ``ban_seconds``."""

    def __init__(
        self,
        rates: tuple[Rate, ...],
        overrides: Mapping[str, tuple[Rate, ...]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = MAX_CLIENTS,
        *,
        ban_after: int = 0,
        ban_seconds: float = 600.0,
        clients: Clients | None = None,
    ) -> None:
        self.rates = rates  # every client's, but a token with its own
        self.overrides = dict(overrides or {})  # key (a token's sha256) -> its rates
        self.clock = clock
        self.ban_after, self.ban_seconds = ban_after, ban_seconds
        self.clients = clients if clients is not None else ClientMemory(max_clients)

    def admit(self, caller: Caller) -> None:
        """Count one request of ``caller``, or raise RateLimited naming the rate it is past (the
        one to wait longest for) and leave its buckets as they were; Banned while it is banned,
        and for the refusal that bans it."""
        rates = self.overrides.get(caller.key, self.rates) if caller.key else self.rates
        if not rates:
            return
        now = self.clock()
        with self.clients.state(caller.client, now) as full_at:
            self._admit(rates, full_at, now)

    def _admit(self, rates: tuple[Rate, ...], full_at: list[float], now: float) -> None:
        """:meth:`admit` on a client's timestamps, which it updates (the time each of its rates'
        buckets is full again: GCRA's "theoretical arrival time", when its refusals are all
        forgiven, when its ban ends)."""
        if full_at[BAN] > now:
            raise Banned(self.ban_after, self.ban_seconds, full_at[BAN] - now)
        taken, refused, wait = [], None, 0.0
        for rate in rates:
            after = max(full_at[_SLOT[rate.reason]], now) + rate.seconds / rate.limit  # with this request taken
            if after - now > rate.seconds * (1 + 1e-9):  # it would hold more than the rate: no room
                if after - now - rate.seconds > wait:
                    refused, wait = rate, after - now - rate.seconds
            taken.append(after)
        if refused is None:
            for rate, after in zip(rates, taken):
                full_at[_SLOT[rate.reason]] = after
            return
        if self.ban_after and self._bans(full_at, now):
            raise Banned(self.ban_after, self.ban_seconds, self.ban_seconds)
        raise RateLimited(refused.limit, refused.period, refused.reason, refused.where, wait)

    def _bans(self, full_at: list[float], now: float) -> bool:
        """Count one refusal of a client; True, with its ban begun, when it holds ``ban_after`` of them."""
        full_at[REFUSALS] = max(full_at[REFUSALS], now) + self.ban_seconds
        if full_at[REFUSALS] - now <= (self.ban_after - 1) * self.ban_seconds * (1 + 1e-9):
            return False
        full_at[BAN] = now + self.ban_seconds
        return True
