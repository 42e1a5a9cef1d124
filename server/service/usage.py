"""Characters translated per client and calendar month (UTC), and each client's monthly quota:
what DeepL's ``/v2/usage`` reports, counted for every door, since every door's translation
passes the translation service (texts, ``TranslationService.events``) or the file service
(files and file jobs, ``FileTranslation.translate``).

A client is the one the request rates count (``Call.client``: its token's sha256 where the
server has tokens, else its address); a call no client sent (the server's own) counts for none.
A request is billed as DeepL bills: the source characters of its texts (a blank text's too), a
file's characters of text (not markup or layout: its ``billed_characters``), once whatever the
models did with them (a pivot's two models, a source to detect, a job resumed after a restart),
and only once it is answered: a refused, failed or abandoned request costs nothing.

The quota (``--characters-per-month``, a token's own ``characters_per_month`` in
``--auth-token-file``; 0 = none) is checked as a request arrives: one that would take its client
past it, or any once it is reached, is refused (``MonthlyQuotaExceeded``); the characters of a client's
requests in flight count as used meanwhile, so concurrent requests cannot pass it together. A
file's characters are known once it is read, so a file is refused then; a file job is refused
when submitted only once the quota is reached.

One request costs a few dictionary operations on the event loop, nothing more: the counts live
in memory (one entry per client seen this month). With a state store (``--state-dir``,
``--state-url``) what was added is written in one transaction every second at most, off the
loop, and the counts the other processes and replicas wrote since the last look are read back
(every ``READ_S`` when nothing was added); the store's row is then a client's month whoever
served it, and a restart loses at most the last second's counts of a process killed without its
stop (a stopped server writes them first). A quota is exact within a process; across processes
it can be passed by what the others added since the last look. Without a state store each
process counts on its own, from zero at its start.
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..shared.config import Settings
from ..shared.errors import MonthlyQuotaExceeded
from ..shared.rates import key_of
from ..shared.security import character_quotas
from ..state import StoreUnavailable
from ..state.usage import UsageStore

log = logging.getLogger(__name__)

SYNC_S = 1.0  # at most, between a process's writes of what it added
READ_S = 5.0  # at most, between two reads of what the others wrote, when this process added nothing
SLACK_S = 60.0  # a read looks this far back past the last: the writers' clocks and transactions differ


def month_of(seconds: float) -> str:
    return time.strftime("%Y-%m", time.gmtime(seconds))


def month_end(seconds: float) -> float:
    """When the calendar month (UTC) of ``seconds`` ends: the next one's first second."""
    year, month = time.gmtime(seconds)[:2]
    return float(calendar.timegm((year + month // 12, month % 12 + 1, 1, 0, 0, 0)))


def previous_month(month: str) -> str:
    year, number = map(int, month.split("-"))
    return f"{year - (number == 1)}-{(number - 2) % 12 + 1:02d}"


@dataclass
class Charge:
    """A request's characters, held while it runs; :meth:`answered` makes them count."""

    characters: int
    counted: bool = False

    def answered(self) -> None:
        self.counted = True


class Usage:
    """Every client's characters this month and its quota (see the module docstring)."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        self.default = settings.characters_per_month
        self.quotas: Mapping[str, int] = character_quotas(settings)  # by key: a token's own
        self.flag = "--characters-per-month"
        self.clock = clock
        self.store: UsageStore | None = None  # set where the server keeps state (keep_in)
        self.month, self.renews = month_of(clock()), month_end(clock())
        self.counts: dict[str, int] = {}  # this month's per client: the store's at the last look + added since
        self.held: dict[str, int] = {}  # the characters of each limited client's requests in flight
        self.unsaved: dict[tuple[str, str], int] = {}  # (client, month) -> added since the last write
        self._io: ThreadPoolExecutor | None = None
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._read = 0.0  # wall clock of the last read of the store
        self._store_down = False  # logged once per outage

    def keep_in(self, store: UsageStore) -> None:
        """Counts kept in ``store`` (the server's state store), read at :meth:`start`."""
        self.store, self._io = store, ThreadPoolExecutor(1, thread_name_prefix="usage")

    # ------------------------------------------------------------------ the hot path

    def limit(self, client: str) -> int:
        """``client``'s characters a month (0: unlimited): its token's own, else the server's."""
        key = key_of(client)
        return self.quotas.get(key, self.default) if key else self.default

    def used(self, client: str) -> int:
        """``client``'s characters translated this month, as this process knows them."""
        self._roll()
        return self.counts.get(client, 0)

    def renewal(self) -> str:
        return time.strftime("%Y-%m-%d", time.gmtime(self.renews))

    @contextlib.contextmanager
    def charge(self, client: str, characters: int) -> Iterator[Charge]:
        """``characters`` of ``client``'s request: refused (MonthlyQuotaExceeded) where they would pass its
        quota, held while the block runs, counted at its end if :meth:`Charge.answered` was called."""
        charge, limit = Charge(characters), self.limit(client) if client else 0
        if limit:
            self._admit(client, characters, limit)
            self.held[client] = self.held.get(client, 0) + characters
        try:
            yield charge
        finally:
            if limit:
                left = self.held.pop(client) - characters
                if left:
                    self.held[client] = left
            if charge.counted and client:
                self.add(client, characters)

    def check(self, client: str) -> None:
        """Refused (MonthlyQuotaExceeded) where ``client`` has reached its quota: a file job's submission,
        whose characters are known only once it runs."""
        limit = self.limit(client) if client else 0
        if limit:
            self._admit(client, 0, limit)

    def _admit(self, client: str, characters: int, limit: int) -> None:
        used = self.used(client) + self.held.get(client, 0)
        if used >= limit or used + characters > limit:
            where = self.flag if key_of(client) not in self.quotas else "characters_per_month of its token"
            asked = f"; this request has {characters:,}" if characters and used < limit else ""
            raise MonthlyQuotaExceeded(
                f"{min(used, limit):,} of this client's {limit:,} characters a month ({where}) are used{asked}; "
                f"the quota renews on {self.renewal()} (UTC)"
            )

    def add(self, client: str, characters: int) -> None:
        """``characters`` translated for ``client`` now."""
        self._roll()
        self.counts[client] = self.counts.get(client, 0) + characters
        if self.store is not None:
            key = (client, self.month)
            self.unsaved[key] = self.unsaved.get(key, 0) + characters

    def _roll(self) -> None:
        now = self.clock()
        if now >= self.renews:  # a new month: every client starts from zero
            self.month, self.renews = month_of(now), month_end(now)
            self.counts.clear()
            self._read = 0.0

    # ------------------------------------------------------------------ the store

    async def report(self, client: str) -> tuple[int, int]:
        """(``client``'s characters this month, its quota: 0 unlimited), the store read first
        (another process's counts for the same client included)."""
        if self.store is not None:
            await self.sync()
        return self.used(client), self.limit(client)

    async def start(self) -> None:
        """This month's counts read from the store, then written and read back every second."""
        if self.store is None:
            return
        await self.sync()
        await self._off(self.store.forget, previous_month(self.month))  # this month's and the last kept
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        """The counts not written yet are written (at the server's stop, after its last request)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.store is not None:
            try:
                await self.sync()
            except Exception:  # noqa: BLE001 - the server must stop all the same
                log.exception("usage: the last characters translated were not written")

    def close(self) -> None:
        if self._io is not None:
            self._io.shutdown(wait=True)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(SYNC_S)
            if self.unsaved or self.clock() - self._read >= READ_S:
                try:
                    await self.sync()
                except Exception:  # noqa: BLE001 - the next second tries again
                    log.exception("usage: the store failed")

    async def _off(self, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def sync(self) -> None:
        """What this process added since the last write goes to the store, and the counts written
        since the last read (this process's and the others') come back. A store that does not
        answer keeps the counts in memory, written with the next."""
        assert self.store is not None
        async with self._lock:
            self._roll()
            unsaved, self.unsaved = self.unsaved, {}
            month, since, started = self.month, self._read - SLACK_S, self.clock()
            try:
                if unsaved:
                    await self._off(self.store.add, unsaved, started)
            except StoreUnavailable as exc:
                for key, characters in unsaved.items():
                    self.unsaved[key] = self.unsaved.get(key, 0) + characters
                return self._down(exc)
            try:
                changed = await self._off(self.store.changed, month, since)
            except StoreUnavailable as exc:
                return self._down(exc)
            if self._store_down:
                log.info("usage: the state store answers again")
            self._store_down = False
            if month != self.month:  # a new month began meanwhile: these counts are the last one's
                return
            self._read = started
            for client, total in changed.items():
                self.counts[client] = total + self.unsaved.get((client, month), 0)

    def _down(self, exc: StoreUnavailable) -> None:
        if not self._store_down:
            log.error("usage: the characters translated are kept in memory until the store answers: %s", exc)
        self._store_down = True
