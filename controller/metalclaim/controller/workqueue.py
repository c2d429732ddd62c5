"""The controller's work queue: client-go semantics, plus batch cutting for ansible-runner.

Reflectors turn API events into keys (hashable tuples such as ``("claim", "tenant-a", "c1")``) and
``add`` them here; a dispatcher thread takes *batches* with :meth:`WorkQueue.get_batch` and hands each
batch to one ansible-runner run, then calls :meth:`WorkQueue.done`.

Semantics (those of client-go's ``workqueue``, with priorities and batches added):

* **Dedup** -- a key is queued once however many times it is added.
* **Processing / dirty** -- a key returned by ``get_batch`` is *processing* until ``done``; it is never in
  two batches at once. Adding it meanwhile marks it dirty, and ``done`` re-queues it exactly once, so the
  state it was added for is seen by one more pass. ``wake`` is an add for a change that matters to the key
  only while it waits (a host became free: the claims without one): a processing key it marks is re-queued
  unless ``done`` is told that its pass settled it (``finished``), as a claim its run bound no longer waits.
* **Priorities** -- :data:`LIVE` keys (watch events) are taken before :data:`RESYNC` keys (resync and
  initial list), so a resync of thousands of keys never starves a new claim. Adding a queued key with a
  better (lower) priority upgrades it. A batch led by a live key takes live keys only (its run is not
  slowed by a resync's keys), and a batch led by a resync key holds at most ``resync_max_size``: a live key
  that comes while resync batches run waits for one small batch at most.
* **Delays** -- ``add_after`` makes a key ready later (the earliest requested time wins); a plain ``add``
  makes it ready at once. ``add_rate_limited`` is ``add_after`` with per-key exponential backoff.
* **Batches** -- ``get_batch`` takes the best ready key, then keeps collecting ready keys of the same
  group (kind, by default) until the flow of new keys stops for ``quiet`` seconds, ``max_wait`` seconds
  pass, or ``max_size`` keys are collected. Idle, one key waits about ``quiet``; in a storm the batch
  grows by itself up to ``max_wait``. A consumer may take only the keys its ``accept`` takes (a runner slot
  kept for one kind of work); the others stay queued, in their order, for the other consumers.
* **Shutdown** -- wakes every waiter; ``get_batch`` returns ``None`` from then on and ``add`` is ignored.

One ``threading.Condition`` guards everything; waits are timed to the next deadline (the next delayed
key, the quiet/max-wait cut), never busy. All times come from the injected ``clock`` (and waits go through
the injected ``wait``); the hooks are called outside the lock.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

__all__ = ["LIVE", "RESYNC", "WorkQueue", "kind_of"]

LIVE = 0
"""Priority of keys from watch events and retries: taken first."""
RESYNC = 1
"""Priority of keys from a resync or an initial list: taken when no live key is ready."""

# Exponent cap for the backoff so base * 2**failures stays a finite float whatever the failure count.
_MAX_EXPONENT = 62


def kind_of(key: Hashable) -> Hashable:
    """Default batch group: the first element of the key tuple (``"claim"``, ``"host"``, ...)."""
    return key[0]  # type: ignore[index]


@dataclass(slots=True)
class _Item:
    """A queued key: its priority, when it is (or becomes) ready, and a version to spot stale heap entries."""

    priority: int
    ready_at: float
    seq: int


class WorkQueue:
    """Deduplicating, prioritised, delaying, rate-limiting work queue that hands out batches.

    A key is in at most one of three places: *queued* (ready or waiting for its delay), *processing*
    (in a batch not yet ``done``; may also be marked dirty), or nowhere.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
        backoff_base: float = 0.05,
        backoff_cap: float = 60.0,
        on_add: Callable[[Hashable], object] | None = None,
        on_get: Callable[[Hashable, float], object] | None = None,
        wait: Callable[[threading.Condition, float | None], object] | None = None,
    ) -> None:
        """``clock``: monotonic seconds; ``rng``: uniform in [0, 1), for the backoff jitter; ``wait(condition,
        seconds)``: how a consumer blocks, the lock held (``Condition.wait``; a test's simulated clock moves its
        time there instead, as client-go's fake clock steps).

        ``on_add(key)`` is called when an add is not absorbed by dedup (``workqueue_adds_total``);
        ``on_get(key, seconds_waited)`` when a key is taken into a batch, with the seconds since it became
        ready (``workqueue_queue_duration_seconds``).
        """
        self._clock = clock
        self._rng = rng
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._on_add = on_add
        self._on_get = on_get
        self._cond = threading.Condition()  # re-entrant: a simulated clock's timers may add while a consumer waits
        self._wait = wait or (lambda condition, seconds: condition.wait(seconds))
        self._seq = itertools.count()
        self._queued: dict[Hashable, _Item] = {}
        # Heaps with lazy deletion: an entry is live while _queued[key].seq == its seq.
        self._ready: list[tuple[int, float, int, Hashable]] = []  # (priority, ready_at, seq, key)
        self._waiting: list[tuple[float, int, Hashable]] = []  # (ready_at, seq, key), ready_at in the future
        self._processing: set[Hashable] = set()
        # processing key -> (priority, ready_at, woken only: re-queued only if its pass did not finish it)
        self._dirty: dict[Hashable, tuple[int, float, bool]] = {}
        self._failures: dict[Hashable, int] = {}
        self._shutting_down = False

    # ----------------------------------------------------------------- producers

    def add(self, key: Hashable, priority: int = LIVE) -> None:
        """Queue ``key``, ready now. Deduplicated; upgrades the priority and cancels the delay of a queued key."""
        self._add(key, priority, 0.0)

    def add_all(self, keys: Iterable[Hashable], priority: int = LIVE) -> None:
        """``add`` each key, all under one hold of the lock: a consumer cutting a batch sees all of them or none (a
        resync's keys make one batch, however short the quiet period and however late their thread is scheduled)."""
        with self._cond:
            if self._shutting_down:
                return
            now = self._clock()
            new = [key for key in keys if self._add_locked(key, priority, now, now)]
        if self._on_add is not None:
            for key in new:
                self._on_add(key)

    def wake(self, key: Hashable, priority: int = LIVE) -> None:
        """``add(key)`` for a change that matters to the key only while it waits: a key being processed is
        queued again after it only if ``done`` does not name it ``finished``."""
        self._add(key, priority, 0.0, woken=True)

    def add_after(self, key: Hashable, delay: float, priority: int = LIVE) -> None:
        """Queue ``key`` to become ready ``delay`` seconds from now (the earliest of several requests wins)."""
        self._add(key, priority, max(0.0, delay))

    def add_rate_limited(self, key: Hashable, priority: int = LIVE) -> float:
        """Re-queue ``key`` after a failure with per-key exponential backoff; return the delay used.

        ``delay = min(backoff_cap, backoff_base * 2**failures) * (0.5 + 0.5 * rng())``, i.e. the capped
        exponential times a jitter factor in [0.5, 1.0), so keys that failed together spread out and the
        delay never exceeds the cap. The key's failure count is incremented; :meth:`forget` resets it.
        """
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        exponential = min(self._backoff_cap, self._backoff_base * 2.0 ** min(failures, _MAX_EXPONENT))
        delay = exponential * (0.5 + 0.5 * self._rng())
        self.add_after(key, delay, priority)
        return delay

    def forget(self, key: Hashable) -> None:
        """Reset ``key``'s failure count (after a success or a permanent error)."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: Hashable) -> int:
        """How many times ``key`` was :meth:`add_rate_limited` since it was last forgotten."""
        with self._cond:
            return self._failures.get(key, 0)

    def _add(self, key: Hashable, priority: int, delay: float, woken: bool = False) -> None:
        with self._cond:
            if self._shutting_down:
                return
            now = self._clock()
            new = self._add_locked(key, priority, now + delay, now, woken)
        if new and self._on_add is not None:
            self._on_add(key)

    def _add_locked(self, key: Hashable, priority: int, ready_at: float, now: float, woken: bool = False) -> bool:
        """Lock held: queue ``key`` or mark it dirty if it is processing; True if it was neither before."""
        if key in self._processing:
            pending = self._dirty.get(key)
            if pending is None:
                self._dirty[key] = (priority, ready_at, woken)
            else:
                self._dirty[key] = (min(pending[0], priority), min(pending[1], ready_at), pending[2] and woken)
            return pending is None
        return self._enqueue(key, priority, ready_at, now)

    def _enqueue(self, key: Hashable, priority: int, ready_at: float, now: float) -> bool:
        """Queue ``key`` (not processing), or merge into its queued entry (better priority, earlier ready time).

        Lock held. Returns True if the key was not queued before; a merge counts as absorbed by dedup.
        """
        item = self._queued.get(key)
        is_new = item is None
        if item is not None:
            if priority >= item.priority and ready_at >= item.ready_at:
                return False
            item.priority = min(item.priority, priority)
            item.ready_at = min(item.ready_at, ready_at)
            item.seq = next(self._seq)
        else:
            item = self._queued[key] = _Item(priority, ready_at, next(self._seq))
        if item.ready_at <= now:
            heapq.heappush(self._ready, (item.priority, item.ready_at, item.seq, key))
        else:
            heapq.heappush(self._waiting, (item.ready_at, item.seq, key))
        self._compact()
        # Wake the waiters: a ready key for a blocked get_batch, or an earlier deadline to wait for.
        self._cond.notify_all()
        return is_new

    # ----------------------------------------------------------------- consumer

    def get_batch(
        self,
        *,
        group: Callable[[Hashable], Hashable] = kind_of,
        max_size: int = 1000,
        quiet: float = 0.02,
        max_wait: float = 0.25,
        timeout: float | None = None,
        accept: Callable[[Hashable], bool] | None = None,
        resync_max_size: int | None = None,
    ) -> list[Hashable] | None:
        """Take a batch of ready keys of one group and mark them processing; call :meth:`done` with it after.

        Blocks until a key is ready; returns ``[]`` if none became ready within ``timeout`` seconds
        (``None``: wait for ever) and ``None`` once the queue is shut down. Takes the ready key with the best
        ``(priority, ready time)``, then collects the ready keys with the same ``group(key)`` -- best first --
        until no new one became ready for ``quiet`` seconds, ``max_wait`` seconds passed since the first was
        taken, or ``max_size`` keys are in the batch. New keys are looked for when the quiet period would end,
        so ``max_size`` also cuts at such a look. If the queue shuts down while a batch is being collected,
        its keys go back to the queue and ``None`` is returned. With ``accept``, only keys it accepts are taken
        (the best of them first) and the others are left queued. A batch whose first key is live collects live
        keys only; one whose first key is a resync key collects both, at most ``resync_max_size`` of them.
        """
        taken: list[tuple[Hashable, _Item, float]] = []  # (key, item, time taken); on_get is called after the lock
        with self._cond:
            deadline = None if timeout is None else self._clock() + timeout
            while True:
                if self._shutting_down:
                    return None
                now = self._clock()
                self._promote(now)
                first = self._pop_best() if accept is None else self._best_accepted(accept)
                if first is not None:
                    break
                if deadline is not None and now >= deadline:
                    return []
                wait = None if deadline is None else deadline - now
                if self._waiting:  # after _promote the top is live and in the future
                    until_next = self._waiting[0][0] - now
                    wait = until_next if wait is None else min(wait, until_next)
                self._wait(self._cond, wait)
            self._take(*first, now, taken)
            batch = [first[0]]
            batch_group = group(first[0])
            lead = first[1].priority
            if lead != LIVE and resync_max_size is not None:
                max_size = min(max_size, resync_max_size)
            started = last_new = now
            while len(batch) < max_size:
                room = max_size - len(batch)
                for key, item in self._take_group(group, batch_group, room, now, taken, accept, lead):
                    batch.append(key)
                    last_new = max(last_new, item.ready_at)
                if len(batch) >= max_size:
                    break
                cut = min(last_new + quiet, started + max_wait)
                if now >= cut:
                    break
                # Sleep to the cut, ignoring adds (they are looked for at the cut); only shutdown interrupts.
                while not self._shutting_down and (now := self._clock()) < cut:
                    self._wait(self._cond, cut - now)
                if self._shutting_down:
                    self._put_back(taken)
                    return None
            self._compact()
        if self._on_get is not None:
            for key, item, taken_at in taken:
                self._on_get(key, max(0.0, taken_at - item.ready_at))
        return batch

    def done(self, keys: Iterable[Hashable], finished: Iterable[Hashable] = ()) -> None:
        """Mark ``keys`` (a batch, or part of one) processed; keys added while processing are re-queued once, but
        those only woken (``wake``) not if their pass ``finished`` them (settled with nothing left to wait for)."""
        finished = set(finished)
        with self._cond:
            now = self._clock()
            for key in keys:
                if key not in self._processing:
                    continue
                self._processing.discard(key)
                pending = self._dirty.pop(key, None)
                if pending is not None and pending[2] and key in finished:
                    continue
                if pending is not None:
                    # It becomes ready no earlier than now: it re-enters the queue at the back of its priority.
                    self._enqueue(key, pending[0], max(pending[1], now), now)

    def shutdown(self) -> None:
        """Stop the queue: wake all waiters; ``get_batch`` returns ``None`` and adds are ignored from now on."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        """True once :meth:`shutdown` was called."""
        with self._cond:
            return self._shutting_down

    def __len__(self) -> int:
        """Depth: keys queued (ready or waiting for a delay), not counting keys being processed."""
        with self._cond:
            return len(self._queued)

    def processing(self) -> set[Hashable]:
        """A copy of the keys currently processing (taken in a batch, not yet done)."""
        with self._cond:
            return set(self._processing)

    # ----------------------------------------------------------------- internals (lock held)

    def _promote(self, now: float) -> None:
        """Move delayed keys that are due to the ready heap; drop stale entries at the top."""
        waiting = self._waiting
        while waiting:
            ready_at, seq, key = waiting[0]
            item = self._queued.get(key)
            if item is not None and item.seq == seq:
                if ready_at > now:
                    break
                heapq.heappush(self._ready, (item.priority, item.ready_at, seq, key))
            heapq.heappop(waiting)

    def _pop_best(self) -> tuple[Hashable, _Item] | None:
        """Remove and return the best ready key, or None."""
        while self._ready:
            _priority, _ready_at, seq, key = heapq.heappop(self._ready)
            item = self._queued.get(key)
            if item is not None and item.seq == seq:
                return key, item
        return None

    def _best_accepted(self, accept: Callable[[Hashable], bool]) -> tuple[Hashable, _Item] | None:
        """The best ready key ``accept`` accepts, or None; left in the ready heap, whose entry goes stale when it is
        taken (a scan, as ``_take_group``'s: the others keep their places)."""
        best = None
        for entry in self._ready:
            item = self._queued.get(entry[3])
            if item is not None and item.seq == entry[2] and (best is None or entry < best) and accept(entry[3]):
                best = entry
        return None if best is None else (best[3], self._queued[best[3]])

    def _take(self, key: Hashable, item: _Item, now: float, taken: list[tuple[Hashable, _Item, float]]) -> None:
        del self._queued[key]
        self._processing.add(key)
        taken.append((key, item, now))

    def _take_group(
        self,
        group: Callable[[Hashable], Hashable],
        batch_group: Hashable,
        room: int,
        now: float,
        taken: list[tuple[Hashable, _Item, float]],
        accept: Callable[[Hashable], bool] | None = None,
        worst: int = RESYNC,
    ) -> list[tuple[Hashable, _Item]]:
        """Take up to ``room`` ready keys of ``batch_group`` (that ``accept`` accepts) of priority ``worst`` or
        better, best first. Their heap entries go stale."""
        candidates = sorted(
            (item.priority, item.ready_at, item.seq, key)
            for key, item in self._queued.items()
            if item.ready_at <= now
            and item.priority <= worst
            and group(key) == batch_group
            and (accept is None or accept(key))
        )[:room]
        new = []
        for _priority, _ready_at, _seq, key in candidates:
            item = self._queued[key]
            self._take(key, item, now, taken)
            new.append((key, item))
        return new

    def _put_back(self, taken: list[tuple[Hashable, _Item, float]]) -> None:
        """Undo a batch being collected (shutdown): its keys are queued again as they were (merged with any re-add)."""
        now = self._clock()
        for key, item, _waited in taken:
            self._processing.discard(key)
            self._enqueue(key, item.priority, item.ready_at, now)
            pending = self._dirty.pop(key, None)
            if pending is not None:
                self._enqueue(key, pending[0], pending[1], now)

    def _compact(self) -> None:
        """Rebuild the heaps when stale entries outnumber live ones, so they stay O(queued)."""
        if len(self._ready) + len(self._waiting) <= 2 * len(self._queued) + 64:
            return
        now = self._clock()
        self._ready = [(i.priority, i.ready_at, i.seq, k) for k, i in self._queued.items() if i.ready_at <= now]
        self._waiting = [(i.ready_at, i.seq, k) for k, i in self._queued.items() if i.ready_at > now]
        heapq.heapify(self._ready)
        heapq.heapify(self._waiting)
