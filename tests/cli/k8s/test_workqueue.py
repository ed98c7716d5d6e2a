"""The controller's work queue keeps client-go's rules (k8s.io/client-go/util/workqueue): a key queued
once however often it is added, never on two workers at once, a failed key back after a per-key
exponential backoff, and keys added after a delay — shown on a clock the test moves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cli.k8s.workqueue import WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_key_added_twice_is_handed_out_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert [queue.get(timeout=0), queue.get(timeout=0), queue.get(timeout=0)] == ["a", "b", None]


def test_a_key_added_while_worked_on_comes_back_only_when_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")  # a new event while a worker has it
    assert queue.get(timeout=0) is None  # not to a second worker
    queue.done("a")
    assert queue.get(timeout=0) == "a"


def test_failures_back_off_exponentially_and_a_success_forgets_them() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(base_delay=1, max_delay=5, clock=clock)
    delays = []
    for _ in range(5):
        delays.append(queue.add_rate_limited("a"))
    assert delays == [1, 2, 4, 5, 5]
    assert queue.get(timeout=0) is None
    clock.now = 1
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    queue.forget("a")
    assert queue.add_rate_limited("a") == 1


def test_a_delayed_key_waits_its_delay_and_shutdown_ends_get() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("later", 10)
    assert queue.get(timeout=0) is None
    clock.now = 10
    assert queue.get(timeout=0) == "later"
    queue.shutdown()
    assert queue.get() is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["add", "get", "done"]), max_size=40),
    st.lists(st.sampled_from("abc"), min_size=40, max_size=40),
)
def test_no_key_is_ever_handed_to_two_workers_at_once(operations: list[str], keys: list[str]) -> None:
    queue: WorkQueue[str] = WorkQueue()
    held: list[str] = []
    for operation, key in zip(operations, keys, strict=False):
        if operation == "add":
            queue.add(key)
        elif operation == "get" and (got := queue.get(timeout=0)) is not None:
            assert got not in held
            held.append(got)
        elif operation == "done" and held:
            queue.done(held.pop(0))
