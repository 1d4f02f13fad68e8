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


def start_stage(stage: Callable[[], None], name: str) -> threading.Thread:
    """Run ``stage`` in a daemon thread of its own, in the caller's context (where
    progress and the audit's actor go, in the service)."""
    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(stage,), name=name, daemon=True
    )
    thread.start()
    return thread
