"""Which workspaces this process is rebuilding, compacting or switching: one such job
at a time per workspace (a rebuild and a compaction would each replace the serving
points), and the imports running, which the service's upkeep leaves alone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class WorkspaceClaims:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._claimed: set[str] = set()  # workspaces being rebuilt or compacted here
        self._importing: dict[str, int] = {}  # workspaces being imported here: how many

    def claim(self, workspace: str) -> bool:
        """Claim the workspace; False if this process holds it already."""
        with self.lock:
            if workspace in self._claimed:
                return False
            self._claimed.add(workspace)
            return True

    def release(self, workspace: str) -> None:
        with self.lock:
            self._claimed.discard(workspace)

    def claimed(self, workspace: str) -> bool:
        with self.lock:
            return workspace in self._claimed

    @contextmanager
    def importing(self, workspace: str) -> Iterator[None]:
        with self.lock:
            self._importing[workspace] = self._importing.get(workspace, 0) + 1
        try:
            yield
        finally:
            with self.lock:
                self._importing[workspace] -= 1
                if not self._importing[workspace]:
                    del self._importing[workspace]

    def imported(self, workspace: str) -> bool:
        """Whether an import of the workspace runs in this process."""
        with self.lock:
            return workspace in self._importing
