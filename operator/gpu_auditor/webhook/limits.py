"""What one webhook process gives any client, and all of them together (issue 26).

The figures behind each bound (bench/results/hostile_servers-webhook.md):

- An AdmissionReview of a pod of 30 containers, each with 42 env entries of 120 characters, 10
  volume mounts, probes and managed fields, is 372 KB; the review of an update carries the
  object twice (743 KB). The API server takes request bodies up to 3 MiB: MAX_BODY.
- `json.loads` of that review peaks at 1.6 MB (4.4 bytes per byte of JSON); of hostile JSON
  of the same size, up to 30 bytes per byte (`[{},{},...]`: 26 MB for 1 MiB; two 16 MiB ones
  took the old server to 902 MB). `parse_cost` bounds it from the body's punctuation before
  any parse; a body over MAX_PARSE_COST is refused unparsed, and WORKERS bodies at most are
  parsed at a time.
- Bytes held for requests not read yet: at most BUFFER_BUDGET in all, CLIENT_BUFFER per
  client, reserved from the Content-Length before the body is read.
- Connections: at most MAX_CONNECTIONS open (an idle one is closed to make room, as a Go
  client expects of a server's idle connections), MAX_CLIENT_CONNECTIONS of one client, and
  MAX_CLIENT_ACTIVE of one client past their handshake and not idle; the rest wait their turn.
- Time: DEADLINE for the TLS handshake, and again for a request's head and body from its
  first byte (in all, not per read: a byte every 5 s no longer holds anything); IDLE_TIMEOUT
  between two requests; the response is written within DEADLINE or the connection is closed.
- Work: WORKERS threads answer requests, taken from the clients in turn (`FairGate`), so one
  client's queue never stands in front of another's; and each client's bodies may cost
  WORK_RATE of `parse_cost` a second past a burst (`Rate`): the GIL makes every answer share
  one CPU, and a client's costly bodies would otherwise take as much of it as they like.

A single address is one client: the API server (each of its replicas), a scraper, a pod that
reaches the port. The bounds keep the process inside the chart's 128 MiB and other clients'
answers fast against one hostile address; many hostile addresses can still take the shared
pools (fail open, as designed), which the chart's NetworkPolicy is for (docs/webhook.md).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final

MAX_BODY: Final = 3 << 20
MAX_HEAD: Final = 16 << 10
"""Bytes of a request line and its headers (the API server sends some 300)."""
MAX_PARSE_COST: Final = 16 << 20
"""`parse_cost` of one body at most: the 743 KB update review costs 6.6 MB (a review of some
1.8 MB passes), hostile 1 MiB ones up to 47 MB (refused with 413, unparsed). json.loads holds
the GIL for the whole parse: this bounds that pause too."""
WORK_RATE: Final = 32 << 20
"""`parse_cost` per second one client's bodies may take (some 3.5 MB of review JSON a second:
dozens of large pods); past its burst a client's requests wait their turn, so one client's
costly admissions take a bounded share of the one CPU the GIL gives Python."""
WORK_BURST: Final = 64 << 20
BUFFER_BUDGET: Final = 16 << 20
CLIENT_BUFFER: Final = 6 << 20
MAX_CONNECTIONS: Final = 512
MAX_CLIENT_CONNECTIONS: Final = 128
MAX_CLIENT_ACTIVE: Final = 32
DEADLINE: Final = 5.0
"""Seconds for a handshake, for a request's head and body, for a response's write (the chart's
webhook timeout is 3 s; the API server has given up by then)."""
IDLE_TIMEOUT: Final = 60.0
WORKERS: Final = 2
BACKLOG: Final = 1024
"""The listen backlog (the kernel caps it at net.core.somaxconn); 5 dropped SYNs under load and
good clients waited 1.03 s for their connect."""


@dataclass(frozen=True)
class Limits:
    """Every bound, in one value (tests shrink them)."""

    max_body: int = MAX_BODY
    max_head: int = MAX_HEAD
    max_parse_cost: int = MAX_PARSE_COST
    work_rate: int = WORK_RATE
    work_burst: int = WORK_BURST
    buffer_budget: int = BUFFER_BUDGET
    client_buffer: int = CLIENT_BUFFER
    max_connections: int = MAX_CONNECTIONS
    max_client_connections: int = MAX_CLIENT_CONNECTIONS
    max_client_active: int = MAX_CLIENT_ACTIVE
    deadline: float = DEADLINE
    idle_timeout: float = IDLE_TIMEOUT
    workers: int = WORKERS
    backlog: int = BACKLOG


def parse_cost(body: bytes) -> int:
    """An upper bound of the bytes `json.loads(body)` allocates, from counts taken in C: each
    `{` or `[` a container (an empty dict is 64 bytes, a key's slot 30 more), each `"` half a
    string (49 bytes and up), each `,` a list slot or a number (a float is 24 bytes), twice the
    text itself. Measured against tracemalloc's peak (bench/hostile_webhook.py): 1.1-3.3x the
    real figure on every shape tried."""
    return (2 * len(body) + 96 * (body.count(b"{") + body.count(b"["))
            + 48 * body.count(b'"') + 32 * body.count(b","))


class Pool:
    """A count shared by every client (bytes, estimates) with a share for each: `take` waits,
    at most until its deadline, for room in both; FIFO per pool."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total, self.per_client = total, per_client
        self.used = 0
        self.by_client: collections.Counter[Hashable] = collections.Counter()
        self._changed = asyncio.Condition()

    def fits(self, client: Hashable, amount: int) -> bool:
        return (self.used + amount <= self.total
                and self.by_client[client] + amount <= self.per_client)

    async def take(self, client: Hashable, amount: int) -> None:
        """Room for ``amount``; raises ValueError when it can never fit."""
        if amount > min(self.total, self.per_client):
            raise ValueError(f"{amount} is over the pool's {min(self.total, self.per_client)}")
        async with self._changed:
            await self._changed.wait_for(lambda: self.fits(client, amount))
            self.used += amount
            self.by_client[client] += amount

    async def give(self, client: Hashable, amount: int) -> None:
        async with self._changed:
            self.used -= amount
            self.by_client[client] -= amount
            if not self.by_client[client]:
                del self.by_client[client]
            self._changed.notify_all()


class FairGate:
    """At most ``slots`` holders at a time, at most ``per_client`` of them one client's, handed
    out to the waiting clients in turn: a client with a hundred requests queued gets one slot,
    then every other waiting client gets one, and so on (round robin over clients, FIFO within
    one). With ``per_client`` below ``slots`` one client's work, however costly, always leaves a
    worker to the others."""

    def __init__(self, slots: int, per_client: int | None = None) -> None:
        self.free = slots
        self.per_client = per_client if per_client is not None else max(1, slots - 1)
        self.running: collections.Counter[Hashable] = collections.Counter()
        self._waiting: collections.OrderedDict[Hashable, collections.deque[asyncio.Future[None]]]
        self._waiting = collections.OrderedDict()

    async def acquire(self, client: Hashable) -> None:
        if self.free > 0 and client not in self._waiting and \
                self.running[client] < self.per_client:
            self.free -= 1
            self.running[client] += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(client, collections.deque()).append(future)
        self._grant()  # a slot may be free for this client, held back from another
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(client)  # granted as it was cancelled: hand the slot on
            else:
                self._forget(client, future)
            raise

    def release(self, client: Hashable) -> None:
        self.running[client] -= 1
        if self.running[client] <= 0:
            del self.running[client]
        self.free += 1
        self._grant()

    def _grant(self) -> None:
        """Free slots to the waiting clients in turn, each below its share."""
        for client in list(self._waiting):
            if self.free <= 0:
                return
            if self.running[client] >= self.per_client:
                continue
            queue = self._waiting.pop(client)
            future = queue.popleft()
            if queue:
                self._waiting[client] = queue  # its next request goes to the back
            if not future.done():
                self.free -= 1
                self.running[client] += 1
                future.set_result(None)

    def _forget(self, client: Hashable, future: asyncio.Future[None]) -> None:
        queue = self._waiting.get(client)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del self._waiting[client]


class Rate:
    """Work per client and second: a bucket of ``burst`` refilled at ``per_second``. `delay`
    takes ``amount`` at once, going into debt, and says how long to wait for it to be paid:
    a client's concurrent requests queue behind each other, another client's do not."""

    MAX_CLIENTS: Final = 4096

    def __init__(self, per_second: float, burst: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second, self.burst, self._clock = per_second, burst, clock
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # client -> (level, at)

    def delay(self, client: Hashable, amount: float) -> float:
        now = self._clock()
        level, at = self._buckets.get(client, (self.burst, now))
        level = min(self.burst, level + (now - at) * self.per_second) - amount
        if len(self._buckets) >= self.MAX_CLIENTS and client not in self._buckets:
            self._forget_full(now)
        self._buckets[client] = (level, now)
        return max(0.0, -level / self.per_second)

    def _forget_full(self, now: float) -> None:
        """Drop the clients whose bucket has refilled (they would start full anyway)."""
        for client, (level, at) in list(self._buckets.items()):
            if level + (now - at) * self.per_second >= self.burst:
                del self._buckets[client]
