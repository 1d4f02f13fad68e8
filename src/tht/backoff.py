"""How long to wait before trying again after failures: shared by the service's retry
of pending index work and the projector's retry of a failed compaction."""

from __future__ import annotations


def doubling_delay(failures: int, base: float, cap: float) -> float:
    """``base`` seconds after the first of ``failures`` consecutive failures, twice as
    long after each further one, never more than ``cap``; 0 without a failure."""
    if failures <= 0:
        return 0.0
    return min(cap, base * 2.0 ** min(failures - 1, 32))  # bounded: no float overflow
