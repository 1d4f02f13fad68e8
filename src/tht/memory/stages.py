"""Handing work between the threads of a pipeline (a rebuild's, an import's): bounded
queues whose waits end when the pipeline stops, so a failed or interrupted stage never
leaves another blocked."""

from __future__ import annotations

import queue
import threading
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
