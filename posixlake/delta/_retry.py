"""The one retry policy for commits that lose to a concurrent writer.

Every write that can lose a commit race goes through :meth:`RetryPolicy.run`: the
delta-rs writes of :class:`~posixlake.delta.DeltaLog` (append, keyed append, delete,
update, merge, replace rows, optimize), the Spark engine's re-planned rewrites and the
Spark data source's commits. One policy, three bounds:

- **attempts**: at most :data:`MAX_COMMIT_ATTEMPTS` commit attempts per write, delta-rs'
  own retries counted. delta-rs retries a commit itself (``max_commit_retries``), rebasing
  it onto concurrent commits that do not conflict with it; we give it
  :data:`DELTA_RS_RETRIES` of them, so a write re-plans at most
  ``MAX_COMMIT_ATTEMPTS // (1 + DELTA_RS_RETRIES)`` times (a *strict* commit, which
  delta-rs must not rebase, re-plans up to ``MAX_COMMIT_ATTEMPTS`` times);
- **time**: no new attempt once ``timeout`` seconds (``$POSIXLAKE_COMMIT_TIMEOUT``, 120 by
  default; ``DatabaseOps.commit_timeout`` per handle) would pass;
- **backoff**: between two attempts, an exponentially growing pause with full jitter, so
  that writers that collided once do not collide again in lockstep.

The attempt bound is wide (30 plannings, about 11 s of pauses at most; 90 for a strict
commit, about 41 s) so that a writer that merely keeps losing the race to others who make
progress (4 processes appending to Azurite in CI lost 10 plannings in a row) waits its
turn; the deadline is what ends a write that cannot get through.

``clock``, ``sleep`` and the random source are injectable (tests pass their own).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

from posixlake.errors import CommitConflict, InvalidOperation

__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MAX",
    "DEFAULT_COMMIT_TIMEOUT",
    "DELTA_RS_RETRIES",
    "MAX_COMMIT_ATTEMPTS",
    "MAX_PLANNINGS",
    "Contention",
    "RetryPolicy",
    "backoff",
    "commit_timeout_from_env",
]

logger = logging.getLogger(__name__)

#: commit attempts of one write at most, delta-rs' own retries included
MAX_COMMIT_ATTEMPTS: Final = 90
#: retries delta-rs makes itself inside one of our attempts (``max_commit_retries``)
DELTA_RS_RETRIES: Final = 2
#: times a write that lets delta-rs retry is planned and committed at most
MAX_PLANNINGS: Final = MAX_COMMIT_ATTEMPTS // (1 + DELTA_RS_RETRIES)
#: how long a write keeps re-planning and retrying on commit conflicts, in seconds
DEFAULT_COMMIT_TIMEOUT: Final = 120.0
#: first and largest pause between two conflicting attempts, in seconds (with jitter)
BACKOFF_FIRST: Final = 0.002
BACKOFF_MAX: Final = 0.5

_T = TypeVar("_T")


def commit_timeout_from_env() -> float:
    """Return ``$POSIXLAKE_COMMIT_TIMEOUT`` (seconds) or :data:`DEFAULT_COMMIT_TIMEOUT`.

    Raises:
        InvalidOperation: the variable is set but not a positive number.
    """
    raw = os.environ.get("POSIXLAKE_COMMIT_TIMEOUT")
    if raw is None or raw == "":
        return DEFAULT_COMMIT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or not value < float("inf"):
        raise InvalidOperation(
            f"POSIXLAKE_COMMIT_TIMEOUT must be a positive number of seconds, not {raw!r}"
        )
    return value


def backoff(attempt: int, rng: random.Random) -> float:
    """Return the pause before retry ``attempt`` (0-based): exponential, capped, jittered.

    Full jitter in [0.5, 1.5) of ``min(BACKOFF_MAX, BACKOFF_FIRST * 2**attempt)``.
    """
    base: float = min(BACKOFF_MAX, BACKOFF_FIRST * float(2 ** min(attempt, 20)))
    return base * (0.5 + rng.random())


class Contention:
    """Commit-conflict figures of one table handle (thread-safe).

    Attributes:
        conflicts: commit attempts that lost to a concurrent commit.
        retries: attempts made again after a conflict (re-planned on the new version).
        gave_up: writes that failed because an attempt or time bound was reached.
        waited_s: total seconds spent in back-off pauses.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.conflicts = 0
        self.retries = 0
        self.gave_up = 0
        self.waited_s = 0.0

    def conflict(self) -> None:
        """Count a lost commit attempt."""
        with self._lock:
            self.conflicts += 1

    def retry(self, waited: float) -> None:
        """Count an attempt made again after a pause of ``waited`` seconds."""
        with self._lock:
            self.retries += 1
            self.waited_s += waited

    def give_up(self) -> None:
        """Count a write abandoned at a bound."""
        with self._lock:
            self.gave_up += 1


@dataclass
class RetryPolicy:
    """Bounded, backed-off retries of commit attempts (see the module docstring).

    Attributes:
        timeout: seconds after the first attempt past which no attempt starts.
        max_attempts: commit attempts per write, delta-rs' own retries counted.
        clock: monotonic seconds.
        sleep: pauses the calling thread.
        rng: the jitter's random source.
        contention: where conflicts, retries and give-ups are counted.
    """

    timeout: float = field(default_factory=commit_timeout_from_env)
    max_attempts: int = MAX_COMMIT_ATTEMPTS
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    contention: Contention = field(default_factory=Contention)

    @staticmethod
    def delta_rs_retries(*, strict: bool = False) -> int:
        """Return the ``max_commit_retries`` to give delta-rs: none for a strict commit
        (one that must fail on ANY concurrent commit, such as a primary-key check)."""
        return 0 if strict else DELTA_RS_RETRIES

    def attempts(self, *, strict: bool = False) -> int:
        """Return how many times a write may be planned and committed (at least once)."""
        return max(1, self.max_attempts // (1 + self.delta_rs_retries(strict=strict)))

    def run(
        self,
        what: str,
        attempt: Callable[[int], _T],
        *,
        strict: bool = False,
        on_conflict: Callable[[CommitConflict], object] | None = None,
    ) -> _T:
        """Call ``attempt(n)`` (n = 0, 1, ...) until it returns without CommitConflict.

        Args:
            what: the operation, for messages.
            attempt: plans and commits once; raises CommitConflict when it lost.
            strict: ``attempt`` commits with :meth:`delta_rs_retries` of ``strict``
                (decides how many of the attempts are ours).
            on_conflict: called after the pause, before the next attempt (refresh the
                log, re-check what the new commits changed; it may raise to give up).

        Raises:
            CommitConflict: still conflicting at the last allowed attempt or past
                ``timeout``; counted in :attr:`contention`.
        """
        bound = self.attempts(strict=strict)
        deadline = self.clock() + self.timeout
        n = 0
        while True:
            try:
                return attempt(n)
            except CommitConflict as err:
                self.contention.conflict()
                pause = backoff(n, self.rng)
                n += 1
                out_of_time = self.clock() + pause > deadline
                if n >= bound or out_of_time:
                    self.contention.give_up()
                    why = (
                        f"the commit deadline ({self.timeout:g} s; raise "
                        "POSIXLAKE_COMMIT_TIMEOUT or DatabaseOps.commit_timeout to wait longer)"
                        if out_of_time
                        else f"the attempt bound ({bound} plannings, each with "
                        f"{self.delta_rs_retries(strict=strict)} delta-rs retries)"
                    )
                    raise CommitConflict(
                        f"{what}: still conflicting with concurrent writers after {n} "
                        f"attempt(s): gave up at {why}"
                    ) from err
                logger.debug("%s: commit conflict, retrying in %.3f s", what, pause)
                self.sleep(pause)
                self.contention.retry(pause)
                if on_conflict is not None:
                    on_conflict(err)
