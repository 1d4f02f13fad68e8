"""Progress lines of long commands on stderr: count, rate and time left."""

from __future__ import annotations

import time
from collections.abc import Callable

EVERY_SECONDS = 2.0  # at most one line this often (and the last one)


class RateProgress:
    """``progress(done, total)`` callback printing ``<verb> done/total cards, N cards/s,
    ETA m:ss``; the rate counts from the first call, so work skipped on a resume (the
    first ``done``) does not inflate it. The first call says what starts: the operator
    sees the command at work before its first cards are done."""

    def __init__(
        self,
        emit: Callable[[str], None],
        verb: str = "indexed",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.emit = emit
        self.verb = verb
        self.clock = clock
        self._start: tuple[float, int] | None = None
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self._start is None:
            self._start = (now, done)
            if done:
                self.emit(f"resuming: {done}/{total} cards already current in the new generation")
            else:
                self.emit(f"{self.verb} 0/{total} cards")
            self._last = now
            return
        if now - self._last < EVERY_SECONDS and done < total:
            return
        self._last = now
        started, first = self._start
        rate = (done - first) / (now - started) if now > started else 0.0
        left = f", ETA {_minutes((total - done) / rate)}" if rate > 0 and done < total else ""
        shown = f"{rate:.0f}" if rate >= 10 else f"{rate:.1f}"
        self.emit(f"{self.verb} {done}/{total} cards, {shown} cards/s{left}")


def _minutes(seconds: float) -> str:
    whole = int(seconds + 0.5)
    return f"{whole // 60}:{whole % 60:02d}"
