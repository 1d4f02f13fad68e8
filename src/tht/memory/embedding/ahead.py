"""Query embeddings computed ahead of the recalls that need them.

A benchmark run or an evaluation asks hundreds of known questions one after the other;
each recall embeds its question (most of a recall's time with a local model) and then
waits on the index and PostgreSQL. ``embedding_ahead`` embeds the next questions in a
background thread into the embedder's query cache (``CachedQueryEmbedder``) while the
caller's recalls wait on the database, so the two overlap; a recall then finds its
vector kept, or waits for the one being computed (the cache computes a key once).

The thread stays at most ``lookahead`` questions ahead of the caller (who calls
``done()`` after each question), so it never evicts from the cache a vector not yet
used. A failure to embed is left to the recall that needs the vector: it computes it
again and raises its own error. Without a query cache nothing runs ahead.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tht.memory.embedding.port import Embedder
from tht.memory.embedding.query_cache import CachedQueryEmbedder

LOOKAHEAD = 16


class _Ahead:
    def __init__(self, embedder: Embedder, questions: Sequence[str], lookahead: int) -> None:
        self.embedder = embedder
        self.questions = questions
        self.room = threading.Semaphore(lookahead)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="embedding-ahead", daemon=True)

    def _run(self) -> None:
        for question in self.questions:
            self.room.acquire()
            if self.stop.is_set():
                return
            try:
                self.embedder.embed_query(question)
            except Exception:  # the recall that needs the vector raises its own error
                continue

    def done(self) -> None:
        """One question of the caller is answered: the thread may go one further."""
        self.room.release()

    def close(self) -> None:
        self.stop.set()
        self.room.release()  # a thread waiting for room sees the stop
        self.thread.join()


class _Inline:
    def done(self) -> None:
        pass


@contextmanager
def embedding_ahead(
    embedder: Embedder, questions: Sequence[str], lookahead: int = LOOKAHEAD
) -> Iterator[_Ahead | _Inline]:
    """Embed ``questions`` (exactly as the recalls will pass them) ahead of the
    caller, at most ``lookahead`` beyond the last ``done()``; the thread ends with the
    block."""
    if not isinstance(embedder, CachedQueryEmbedder) or len(questions) < 2:
        yield _Inline()
        return
    ahead = _Ahead(embedder, questions, max(1, min(lookahead, embedder.cache.entries // 2)))
    ahead.thread.start()
    try:
        yield ahead
    finally:
        ahead.close()
