"""The one commit retry policy (posixlake.delta._retry): bounded attempts counting
delta-rs' own retries, jittered exponential back-off, a deadline; clock and sleep injected."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from posixlake.delta._retry import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    DELTA_RS_RETRIES,
    MAX_COMMIT_ATTEMPTS,
    MAX_PLANNINGS,
    RetryPolicy,
    backoff,
)
from posixlake.engines.spark import MAX_ATTEMPTS
from posixlake.errors import CommitConflict


class FakeTime:
    """A clock that only sleeping moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def policy(t: FakeTime, *, timeout: float = 1000.0) -> RetryPolicy:
    return RetryPolicy(timeout=timeout, clock=t.clock, sleep=t.sleep, rng=random.Random(7))


def losing(calls: list[int]) -> Callable[[int], None]:
    def attempt(n: int) -> None:
        calls.append(n)
        raise CommitConflict("lost")

    return attempt


def test_bound_counts_delta_rs_retries() -> None:
    t = FakeTime()
    calls: list[int] = []
    with pytest.raises(CommitConflict, match="attempt bound"):
        policy(t).run("w", losing(calls))
    assert len(calls) == MAX_PLANNINGS == MAX_COMMIT_ATTEMPTS // (1 + DELTA_RS_RETRIES)
    assert MAX_ATTEMPTS == MAX_PLANNINGS  # the Spark engine follows the same policy
    assert len(t.pauses) == len(calls) - 1


def test_strict_commits_get_every_attempt() -> None:
    t = FakeTime()
    calls: list[int] = []
    p = policy(t)
    with pytest.raises(CommitConflict):
        p.run("w", losing(calls), strict=True)
    assert len(calls) == MAX_COMMIT_ATTEMPTS
    assert RetryPolicy.delta_rs_retries(strict=True) == 0
    assert (p.contention.conflicts, p.contention.retries, p.contention.gave_up) == (
        MAX_COMMIT_ATTEMPTS,
        MAX_COMMIT_ATTEMPTS - 1,
        1,
    )


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    rng = random.Random(1)
    for attempt in range(30):
        base = min(BACKOFF_MAX, BACKOFF_FIRST * 2**attempt)
        pause = backoff(attempt, rng)
        assert 0.5 * base <= pause < 1.5 * base
    assert len({backoff(3, rng) for _ in range(20)}) > 1  # jittered


def test_deadline_stops_before_the_bound() -> None:
    t = FakeTime()
    calls: list[int] = []
    with pytest.raises(CommitConflict, match="deadline"):
        policy(t, timeout=0.05).run("w", losing(calls))
    assert 1 < len(calls) < MAX_PLANNINGS
    assert t.now <= 0.05


def test_a_win_after_conflicts_returns_and_re_plans_after_each_pause() -> None:
    t = FakeTime()
    events: list[str] = []

    def attempt(n: int) -> int:
        events.append(f"attempt {n}")
        if n < 2:
            raise CommitConflict("lost")
        return 42

    p = policy(t)
    assert p.run("w", attempt, on_conflict=lambda err: events.append("refresh")) == 42
    assert events == ["attempt 0", "refresh", "attempt 1", "refresh", "attempt 2"]
    assert (p.contention.conflicts, p.contention.retries, p.contention.gave_up) == (2, 2, 0)
    assert p.contention.waited_s == pytest.approx(sum(t.pauses))


def test_on_conflict_may_give_up() -> None:
    t = FakeTime()

    def recheck(err: CommitConflict) -> None:
        raise KeyError("taken")

    with pytest.raises(KeyError):
        policy(t).run("w", losing([]), on_conflict=recheck)
