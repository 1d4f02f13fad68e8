"""Progress lines of a rebuild: count, rate (of this run's work) and time left."""

from __future__ import annotations

from tht.commands.progress_rate import RateProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lines_give_count_rate_and_eta_and_a_resume_does_not_inflate_the_rate():
    lines: list[str] = []
    clock = Clock()
    progress = RateProgress(lines.append, clock=clock)
    progress(400, 1000)  # resumed: 400 were already current
    assert lines == ["resuming: 400/1000 cards already current in the new generation"]
    clock.now += 3
    progress(700, 1000)  # 300 cards in 3 s
    assert lines[-1] == "indexed 700/1000 cards, 100 cards/s, ETA 0:03"
    clock.now += 0.5
    progress(750, 1000)  # too soon after the last line
    assert len(lines) == 2
    clock.now += 0.5
    progress(1000, 1000)  # the last line always comes
    assert lines[-1] == "indexed 1000/1000 cards, 150 cards/s"


def test_a_fresh_start_says_so_then_counts_the_work_done():
    lines: list[str] = []
    clock = Clock()
    progress = RateProgress(lines.append, clock=clock)
    progress(0, 50)
    assert lines == ["indexed 0/50 cards"]  # at once: the command is at work
    clock.now += 1
    progress(5, 50)  # too soon after the first line
    assert len(lines) == 1
    clock.now += 124
    progress(10, 50)
    assert lines[-1] == "indexed 10/50 cards, 0.1 cards/s, ETA 8:20"
