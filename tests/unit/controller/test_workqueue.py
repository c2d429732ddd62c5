"""Unit tests of metalclaim.controller.workqueue: client-go semantics, priorities, delays, backoff, batch cutting."""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time

import pytest

from metalclaim.controller.workqueue import LIVE, RESYNC, WorkQueue

# get_batch settings that never wait: with a fake clock, a batch is cut as soon as it is collected.
NOW = {"quiet": 0, "max_wait": 0, "timeout": 0}


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SimClock(FakeClock):
    """Simulated time for a queue's waits, as client-go's fake clock steps: a consumer's wait moves the time at once,
    to the next timer (and runs it, the queue's lock held, as another thread's add would run) or by the wait's
    length. Batch cutting is then exact and independent of the machine's load."""

    def __init__(self, start: float = 1000.0) -> None:
        super().__init__(start)
        self._timers: list[tuple[float, int, object]] = []
        self._seq = itertools.count()
        self.waits: list[float | None] = []

    def at(self, offset: float, action) -> None:
        heapq.heappush(self._timers, (self.now + offset, next(self._seq), action))

    def wait(self, _condition, seconds: float | None) -> None:
        self.waits.append(seconds)
        if self._timers and (seconds is None or self._timers[0][0] <= self.now + seconds):
            when, _seq, action = heapq.heappop(self._timers)
            self.now = max(self.now, when)
            action()
        elif seconds is None:
            raise AssertionError("a wait for ever with nothing scheduled")
        else:
            self.now += seconds


def sim_queue() -> tuple[WorkQueue, SimClock]:
    sim = SimClock()
    return WorkQueue(clock=sim, wait=sim.wait, rng=lambda: 0.0), sim


def claim(name: str) -> tuple[str, str, str]:
    return ("claim", "tenant-a", name)


def host(name: str) -> tuple[str, str, str]:
    return ("host", "infra", name)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> WorkQueue:
    return WorkQueue(clock=clock, rng=lambda: 0.0)


# ----------------------------------------------------------------------------- client-go semantics


def test_dedup_hundred_adds_one_key(clock: FakeClock) -> None:
    adds = []
    q = WorkQueue(clock=clock, on_add=adds.append)
    for _add in range(100):
        q.add(claim("c1"))
    assert len(q) == 1
    assert adds == [claim("c1")]
    assert q.get_batch(**NOW) == [claim("c1")]
    assert len(q) == 0
    assert q.get_batch(**NOW) == []


def test_key_never_in_two_batches_at_once(queue: WorkQueue) -> None:
    queue.add(claim("c1"))
    assert queue.get_batch(**NOW) == [claim("c1")]
    assert queue.processing() == {claim("c1")}
    queue.add(claim("c1"))  # while processing: dirty, not queued
    assert len(queue) == 0
    assert queue.get_batch(**NOW) == []
    queue.done([claim("c1")])
    assert queue.processing() == set()
    assert queue.get_batch(**NOW) == [claim("c1")]


def test_add_during_processing_gives_exactly_one_more_pass(queue: WorkQueue) -> None:
    queue.add(claim("c1"))
    batch = queue.get_batch(**NOW)
    for _add in range(5):
        queue.add(claim("c1"))
    queue.done(batch)
    assert len(queue) == 1
    batch = queue.get_batch(**NOW)
    assert batch == [claim("c1")]
    queue.done(batch)
    assert len(queue) == 0
    assert queue.get_batch(**NOW) == []


def test_a_wake_during_processing_gives_one_more_pass_only_if_the_pass_did_not_finish_the_key(
    queue: WorkQueue,
) -> None:
    """Churn (issue 24): every host given back woke every claim without one, also those whose run was binding
    them right then; each ran once more for nothing. A wake re-queues a processing key only if its pass left it
    waiting; an add (anything else the key reads changed) still re-queues it."""
    queue.add(claim("bound"))
    queue.add(claim("waiting"))
    queue.add(claim("changed"))
    batch = queue.get_batch(**NOW)
    for key in batch:
        queue.wake(key)
    queue.add(claim("changed"))  # a wake and an add: the add stands
    queue.done(batch, finished=[claim("bound"), claim("changed")])
    assert sorted(queue.get_batch(**NOW)) == [claim("changed"), claim("waiting")]
    # Not processing: a wake queues the key as an add does (deduplicated).
    queue.wake(claim("idle"))
    queue.wake(claim("idle"))
    assert len(queue) == 1


def test_done_without_add_does_not_requeue_and_ignores_unknown_keys(queue: WorkQueue) -> None:
    queue.add(claim("c1"))
    queue.done(queue.get_batch(**NOW))
    queue.done([claim("never-taken")])
    assert len(queue) == 0
    assert queue.processing() == set()


# ----------------------------------------------------------------------------- priorities


def test_live_key_taken_before_resync_keys_queued_earlier(queue: WorkQueue, clock: FakeClock) -> None:
    for i in range(3):
        queue.add(host(f"h{i}"), RESYNC)
        clock.advance(1)
    queue.add(claim("new"), LIVE)
    assert queue.get_batch(**NOW) == [claim("new")]
    assert queue.get_batch(**NOW) == [host("h0"), host("h1"), host("h2")]


def test_higher_priority_add_upgrades_a_queued_key(queue: WorkQueue, clock: FakeClock) -> None:
    queue.add(host("h0"), RESYNC)
    clock.advance(1)
    queue.add(claim("c1"), RESYNC)
    clock.advance(1)
    queue.add(claim("c1"), LIVE)
    queue.add(host("h0"), RESYNC)  # same priority again: no change
    assert queue.get_batch(**NOW) == [claim("c1")]
    assert queue.get_batch(**NOW) == [host("h0")]


def test_resync_of_1000_keys_delays_a_live_key_by_at_most_one_small_batch(queue: WorkQueue, clock: FakeClock) -> None:
    for i in range(1000):
        queue.add(claim(f"c{i}"), RESYNC)
    first = queue.get_batch(max_size=1000, resync_max_size=100, **NOW)
    assert len(first) == 100  # a resync batch is small however large a live one may grow
    queue.add(host("new"), LIVE)  # another group: waits only for the batch in flight
    assert queue.get_batch(max_size=1000, resync_max_size=100, **NOW) == [host("new")]
    clock.advance(1)
    queue.add(claim("new"), LIVE)
    # A live key's batch takes no resync key: its run is not slowed by 900 keys with nothing new.
    assert queue.get_batch(max_size=1000, resync_max_size=100, **NOW) == [claim("new")]
    second = queue.get_batch(max_size=1000, resync_max_size=100, **NOW)
    assert len(second) == 100 and not set(first) & set(second)


def test_a_live_batch_is_not_capped_by_the_resync_size(queue: WorkQueue) -> None:
    for i in range(300):
        queue.add(claim(f"c{i}"), LIVE)
    assert len(queue.get_batch(max_size=1000, resync_max_size=100, **NOW)) == 300


def test_live_key_joins_the_resync_batch_being_collected() -> None:
    q, sim = sim_queue()
    for i in range(1000):
        q.add(claim(f"c{i}"), RESYNC)
    sim.at(0.01, lambda: q.add(claim("new"), LIVE))
    batch = q.get_batch(max_size=2000, quiet=0.5, max_wait=2, timeout=3)
    assert len(batch) == 1001
    assert claim("new") in batch


# ----------------------------------------------------------------------------- delays


def test_add_after_becomes_ready_at_now_plus_delay(queue: WorkQueue, clock: FakeClock) -> None:
    queue.add_after(claim("c1"), 5.0)
    assert len(queue) == 1
    clock.advance(4.9)
    assert queue.get_batch(**NOW) == []
    clock.advance(0.1)
    assert queue.get_batch(**NOW) == [claim("c1")]


def test_add_after_twice_earliest_wins(queue: WorkQueue, clock: FakeClock) -> None:
    queue.add_after(claim("c1"), 10.0)
    queue.add_after(claim("c1"), 2.0)
    queue.add_after(claim("c1"), 7.0)
    clock.advance(2.0)
    assert queue.get_batch(**NOW) == [claim("c1")]
    queue.done([claim("c1")])
    clock.advance(100)
    assert queue.get_batch(**NOW) == []


def test_plain_add_overrides_a_delay(queue: WorkQueue) -> None:
    queue.add_after(claim("c1"), 30.0)
    queue.add(claim("c1"))
    assert queue.get_batch(**NOW) == [claim("c1")]


def test_add_after_during_processing_requeues_after_the_delay(queue: WorkQueue, clock: FakeClock) -> None:
    queue.add(claim("c1"))
    batch = queue.get_batch(**NOW)
    queue.add_after(claim("c1"), 5.0)
    clock.advance(1)
    queue.done(batch)
    assert len(queue) == 1
    assert queue.get_batch(**NOW) == []
    clock.advance(4)
    assert queue.get_batch(**NOW) == [claim("c1")]


def test_delayed_key_wakes_a_blocked_get_batch_without_busy_waiting() -> None:
    q, sim = sim_queue()
    q.add_after(claim("c1"), 0.1)
    start = sim.now
    assert q.get_batch(quiet=0, max_wait=0, timeout=2) == [claim("c1")]
    assert sim.now - start == pytest.approx(0.1)
    assert sim.waits == [pytest.approx(0.1)]  # one wait, timed to the delayed key


# ----------------------------------------------------------------------------- backoff


def test_backoff_grows_exponentially_to_the_cap() -> None:
    q = WorkQueue(clock=FakeClock(), rng=lambda: 0.0, backoff_base=0.05, backoff_cap=1.0)
    delays = [q.add_rate_limited(claim("c1")) for _failure in range(8)]
    # jitter factor 0.5 with rng() == 0
    assert delays == pytest.approx([0.025, 0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.5])
    assert q.failures(claim("c1")) == 8
    assert q.failures(claim("other")) == 0


def test_backoff_jitter_bounds() -> None:
    rng = random.Random(42)
    q = WorkQueue(clock=FakeClock(), rng=rng.random, backoff_base=1.0, backoff_cap=8.0)
    for i in range(200):
        key = claim(f"c{i}")
        for failures in range(6):
            nominal = min(8.0, 2.0**failures)
            delay = q.add_rate_limited(key)
            assert 0.5 * nominal <= delay < nominal
    # extremes of rng: [0.5, 1.0)
    q = WorkQueue(clock=FakeClock(), rng=lambda: 0.999999, backoff_base=1.0, backoff_cap=8.0)
    assert 0.999 < q.add_rate_limited(claim("c1")) < 1.0


def test_backoff_survives_huge_failure_counts() -> None:
    q = WorkQueue(clock=FakeClock(), rng=lambda: 0.0, backoff_base=0.05, backoff_cap=60.0)
    for _draw in range(2000):
        delay = q.add_rate_limited(claim("c1"))
    assert delay == 30.0


def test_forget_resets_failures(queue: WorkQueue, clock: FakeClock) -> None:
    for _draw in range(4):
        queue.add_rate_limited(claim("c1"))
    assert queue.failures(claim("c1")) == 4
    queue.forget(claim("c1"))
    assert queue.failures(claim("c1")) == 0
    assert queue.add_rate_limited(claim("c1")) == pytest.approx(0.025)


def test_rate_limited_key_is_queued_with_its_delay(queue: WorkQueue, clock: FakeClock) -> None:
    delay = queue.add_rate_limited(claim("c1"))
    assert queue.get_batch(**NOW) == []
    clock.advance(delay)
    assert queue.get_batch(**NOW) == [claim("c1")]


# ----------------------------------------------------------------------------- batch cutting


def test_quiet_period_cuts_a_batch() -> None:
    q, sim = sim_queue()
    q.add(claim("c0"))
    for i in range(1, 4):
        sim.at(0.01 * i, lambda i=i: q.add(claim(f"c{i}")))
    sim.at(0.43, lambda: q.add(claim("late")))  # far more than quiet after c3: must not join
    start = sim.now
    batch = q.get_batch(quiet=0.1, max_wait=1.0, timeout=1)
    assert batch == [claim(f"c{i}") for i in range(4)]
    assert sim.now - start == pytest.approx(0.13)  # quiet after the last key that joined
    assert q.get_batch(quiet=0, max_wait=0, timeout=1) == [claim("late")]


def test_idle_single_key_waits_about_quiet() -> None:
    q, sim = sim_queue()
    q.add(claim("c1"))
    start = sim.now
    assert q.get_batch(quiet=0.03, max_wait=1.0) == [claim("c1")]
    assert sim.now - start == pytest.approx(0.03)


def test_max_wait_cuts_a_storm() -> None:
    q, sim = sim_queue()
    for i in range(500):  # a key every 3 ms, for 1.5 s
        sim.at(0.003 * i, lambda i=i: q.add(claim(f"c{i}")))
    start = sim.now
    batch = q.get_batch(quiet=0.05, max_wait=0.15, timeout=1)
    assert sim.now - start == pytest.approx(0.15, abs=0.004)  # max_wait after the first key, not quiet
    assert 45 <= len(batch) <= 52  # the batch grew by itself during the storm


def test_max_size_cuts_a_batch(queue: WorkQueue) -> None:
    for i in range(10):
        queue.add(claim(f"c{i}"))
    sizes = []
    while batch := queue.get_batch(max_size=4, **NOW):
        sizes.append(len(batch))
    assert sizes == [4, 4, 2]
    assert len(queue.processing()) == 10


def test_max_size_one_returns_at_once() -> None:
    q, sim = sim_queue()
    q.add(claim("c1"))
    assert q.get_batch(max_size=1, quiet=5, max_wait=5) == [claim("c1")]
    assert sim.waits == []  # not quiet (5 s): max_size cut it


def test_batch_never_mixes_groups(queue: WorkQueue, clock: FakeClock) -> None:
    for i in range(5):
        queue.add(claim(f"c{i}"))
        clock.advance(0.1)
        queue.add(host(f"h{i}"))
        clock.advance(0.1)
    first = queue.get_batch(**NOW)
    second = queue.get_batch(**NOW)
    assert first == [claim(f"c{i}") for i in range(5)]
    assert second == [host(f"h{i}") for i in range(5)]


def test_custom_group_function(queue: WorkQueue) -> None:
    queue.add(claim("c1"))
    queue.add(("claim", "tenant-b", "c2"))
    queue.add(claim("c3"))
    by_namespace = {"group": lambda key: key[:2], **NOW}
    assert queue.get_batch(**by_namespace) == [claim("c1"), claim("c3")]
    assert queue.get_batch(**by_namespace) == [("claim", "tenant-b", "c2")]


def remote(name: str) -> tuple[str, str, str]:
    return ("remote", "tenant-a", name)


def test_a_consumer_takes_only_the_keys_it_accepts_and_leaves_the_others_in_order(
    queue: WorkQueue, clock: FakeClock
) -> None:
    """Issue 22: a runner slot kept for remote claims, the others never taking them."""
    queue.add(remote("r1"))
    clock.advance(0.1)
    queue.add(claim("c1"))
    clock.advance(0.1)
    queue.add(remote("r2"))
    clock.advance(0.1)
    queue.add(host("h1"))
    not_remote = {"accept": lambda key: key[0] != "remote", **NOW}
    only_remote = {"accept": lambda key: key[0] == "remote", **NOW}
    assert queue.get_batch(**not_remote) == [claim("c1")]  # r1 is older and better: not this consumer's
    assert queue.get_batch(**only_remote) == [remote("r1"), remote("r2")]
    assert queue.get_batch(**only_remote) == []
    assert queue.get_batch(**not_remote) == [host("h1")]
    assert len(queue) == 0


def test_a_consumer_waiting_for_its_keys_wakes_for_one_and_not_for_the_others() -> None:
    q = WorkQueue()
    result = []
    t = threading.Thread(
        target=lambda: result.append(q.get_batch(accept=lambda key: key[0] == "remote", quiet=0, max_wait=0))
    )
    t.start()
    q.add(claim("c1"))  # not its kind: it keeps waiting, the key stays queued
    time.sleep(0.1)
    assert result == [] and len(q) == 1
    q.add(remote("r1"))
    t.join(timeout=1)
    assert result == [[remote("r1")]]
    assert q.get_batch(timeout=0, quiet=0, max_wait=0) == [claim("c1")]


def test_hooks_report_adds_and_queue_duration(clock: FakeClock) -> None:
    adds, gets = [], []
    q = WorkQueue(clock=clock, on_add=adds.append, on_get=lambda key, waited: gets.append((key, waited)))
    q.add(claim("c1"))
    clock.advance(2)
    q.add(claim("c1"))
    q.add(claim("c2"))
    q.add(claim("c2"), RESYNC)  # absorbed
    clock.advance(1)
    q.add_after(claim("c3"), 0.5)
    q.add(claim("c3"), LIVE)  # merged (ready now): absorbed too
    q.add_after(claim("c4"), 0.5)
    clock.advance(1)
    batch = q.get_batch(**NOW)
    assert batch == [claim("c1"), claim("c2"), claim("c3"), claim("c4")]
    assert adds == [claim("c1"), claim("c2"), claim("c3"), claim("c4")]
    assert gets == [(claim("c1"), 4.0), (claim("c2"), 2.0), (claim("c3"), 1.0), (claim("c4"), 0.5)]


# ----------------------------------------------------------------------------- shutdown


def test_shutdown_wakes_a_blocked_get_batch() -> None:
    q = WorkQueue()
    result = []
    t = threading.Thread(target=lambda: result.append(q.get_batch()))
    t.start()
    time.sleep(0.05)
    q.shutdown()
    t.join(timeout=1)
    assert not t.is_alive()
    assert result == [None]
    q.add(claim("c1"))  # ignored once shut down
    assert len(q) == 0
    assert q.get_batch(timeout=0) is None


def test_shutdown_during_collection_puts_the_keys_back() -> None:
    q = WorkQueue()
    q.add(claim("c1"), RESYNC)
    q.add(claim("c2"), RESYNC)
    result = []
    t = threading.Thread(target=lambda: result.append(q.get_batch(quiet=5, max_wait=5)))
    t.start()
    time.sleep(0.05)
    assert q.processing() == {claim("c1"), claim("c2")}
    q.shutdown()
    t.join(timeout=1)
    assert result == [None]
    assert q.processing() == set()
    assert len(q) == 2


def test_timeout_returns_empty_list() -> None:
    q, sim = sim_queue()
    start = sim.now
    assert q.get_batch(timeout=0.05) == []
    assert sim.now - start == pytest.approx(0.05)


# ----------------------------------------------------------------------------- concurrency


def test_stress_invariants_with_concurrent_producers_and_consumers() -> None:
    q = WorkQueue(backoff_base=0.001, backoff_cap=0.005)
    keys = [claim(f"c{i}") for i in range(40)] + [host(f"h{i}") for i in range(20)]
    lock = threading.Lock()
    counter = iter(range(10**9))
    last_add: dict[tuple, int] = {}
    last_start: dict[tuple, int] = {}
    in_flight: set[tuple] = set()
    errors: list[str] = []

    def producer(seed: int) -> None:
        rng = random.Random(seed)
        for n in range(400):
            key = rng.choice(keys)
            with lock:  # recorded before the add: the pass that satisfies it must start after this point
                last_add[key] = next(counter)
            choice = rng.random()
            if choice < 0.6:
                q.add(key, LIVE)
            elif choice < 0.8:
                q.add(key, RESYNC)
            elif choice < 0.9:
                q.add_after(key, rng.random() * 0.005)
            else:
                q.add_rate_limited(key)
            if n % 50 == 0:
                time.sleep(0.001)

    def consumer(seed: int) -> None:
        rng = random.Random(seed)
        while True:
            batch = q.get_batch(quiet=0.001, max_wait=0.005, max_size=rng.choice([1, 5, 100]), timeout=0.05)
            if batch is None:
                return
            if not batch:
                continue
            with lock:
                if len({key[0] for key in batch}) != 1:
                    errors.append(f"mixed batch {batch}")
                if len(set(batch)) != len(batch):
                    errors.append(f"duplicate in batch {batch}")
                if overlap := in_flight.intersection(batch):
                    errors.append(f"keys in two batches at once: {overlap}")
                in_flight.update(batch)
                start = next(counter)
                for key in batch:
                    last_start[key] = start
            time.sleep(rng.random() * 0.002)
            with lock:
                in_flight.difference_update(batch)
            for key in batch:
                if rng.random() < 0.5:
                    q.forget(key)
            q.done(batch)

    producers = [threading.Thread(target=producer, args=(i,)) for i in range(4)]
    consumers = [threading.Thread(target=consumer, args=(100 + i,)) for i in range(2)]
    for t in consumers + producers:
        t.start()
    for t in producers:
        t.join()
    deadline = time.monotonic() + 5.0
    while (len(q) or q.processing()) and time.monotonic() < deadline:
        time.sleep(0.01)
    q.shutdown()
    for t in consumers:
        t.join(timeout=1)
        assert not t.is_alive()
    assert errors == []
    assert len(q) == 0
    assert q.processing() == set()
    stale = {key: (last_add[key], last_start.get(key)) for key in last_add if last_start.get(key, -1) < last_add[key]}
    assert stale == {}, "keys not processed after their last add"


def test_add_all_queues_keys_at_one_instant_marks_processing_ones_dirty_and_counts_new_ones() -> None:
    added = []
    sim = SimClock()
    queue = WorkQueue(clock=sim, wait=sim.wait, rng=lambda: 0.0, on_add=added.append)
    queue.add(claim("busy"))
    assert queue.get_batch(**NOW) == [claim("busy")]
    # A resync thread's keys, added one by one, may be cut apart by a consumer whose quiet period ends between two
    # adds; added at once they are one batch.
    sim.at(0.001, lambda: queue.add(claim("a")))
    sim.at(0.010, lambda: queue.add(claim("b")))
    assert queue.get_batch(quiet=0.005, max_wait=0.25) == [claim("a")]
    queue.done([claim("a")])
    assert queue.get_batch(quiet=0, max_wait=0, timeout=1) == [claim("b")]
    queue.done([claim("b")])
    sim.at(0.001, lambda: queue.add_all([claim("a"), claim("b"), claim("busy")], RESYNC))
    assert queue.get_batch(quiet=0.005, max_wait=0.25) == [claim("a"), claim("b")]
    queue.done([claim("a"), claim("b")])
    queue.add_all([claim("a")], RESYNC)  # queued already: absorbed
    queue.done([claim("busy")])  # its pass is over: the resync's mark gives it one more
    assert sorted(queue.get_batch(**NOW)) == [claim("a"), claim("busy")]
    assert added == [claim("busy"), claim("a"), claim("b"), claim("a"), claim("b"), claim("busy"), claim("a")]
