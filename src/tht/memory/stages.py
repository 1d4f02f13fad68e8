"""Handing work between the threads of a pipeline (a rebuild's, an import's): bounded
queues whose waits end when the pipeline stops, so a failed or interrupted stage never
leaves another blocked."""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any


def hand_over(channel: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Hand ``item`` to the next stage; False if the pipeline stopped meanwhile."""
    while not stop.is_set():
        try:
            channel.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def take_over(channel: queue.Queue[Any], stop: threading.Event) -> Any:
    """The next item of the previous stage; None at its end or once the pipeline stopped."""
    while not stop.is_set():
        try:
            return channel.get(timeout=0.1)
        except queue.Empty:
            continue
    return None


class Stage(threading.Thread):
    """A daemon thread whose end is an event, not ``is_alive()``: on CPython up to 3.12
    a Ctrl-C that interrupts a ``join`` of a thread can mark it dead while it still
    runs (python/cpython#90882), and the waiter then went on without its outcome (an
    import interrupted while it compacted failed with an IndexError)."""

    def __init__(self, stage: Callable[[], None], name: str) -> None:
        super().__init__(target=contextvars.copy_context().run, args=(stage,), name=name)
        self.daemon = True
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.ended.set()

    def running(self) -> bool:
        return not self.ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for its end, up to ``timeout`` seconds (a wait a Ctrl-C can interrupt
        without harm); whether it ended."""
        return self.ended.wait(timeout)


def start_stage(stage: Callable[[], None], name: str) -> Stage:
    """Run ``stage`` in a daemon thread of its own, in the caller's context (where
    progress and the audit's actor go, in the service)."""
    thread = Stage(stage, name)
    thread.start()
    return thread
