"""The benchmarks' simulated remote embedder: an OpenAI-compatible embeddings server on a
GPU, played by a local server in a separate process.

The server (``tests/embedding_server.py``, threaded) answers each batch after sleeping
the batch's model time, ``size / rate`` seconds, one batch at a time as on one GPU:
``rate`` (cards/s) is the fastest the simulated model can go, and it is read from the
request path (base URL ``http://127.0.0.1:PORT/rate/N``), so one server serves every
rate of a run. Its vectors cost it nearly nothing, so on a shared machine the server
does not take CPU from the process measured: 4 096 random unit vectors are drawn and
encoded once, at start (as JSON text, and as float32 bytes for the base64 answers
that the product's client asks for), and a text's vector is the one its BLAKE2 hash
picks with its first component replaced by one from the hash (every text gets its own
vector, a function of the text). Our process pays what it pays with a real remote
server: the HTTP round trip and the decoding of ``dimension`` floats a card (base64,
as it asks OpenAI for them).

The client is the product's own ``openai`` embedder, built from a runtime file's
``embedding`` section exactly as a user configures it (``embedder``).

    .venv/bin/python bench/remote_embedder.py --dimension 384   # serve, print the URL
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.embedding_server import EmbeddingServer  # noqa: E402

from tht.memory.embedding import Embedder, build_embedder  # noqa: E402
from tht.settings import load_runtime_config  # noqa: E402

POOL = 4096
_RATE = re.compile(r"^/rate/(\d+(?:\.\d+)?)/")


def pooled_vectors(
    dimension: int, seed: int = 11
) -> tuple[list[str], list[str], list[bytes], list[bytes]]:
    """POOL unit vectors without their first component, and POOL first components, as
    JSON text and as float32 bytes: a text's vector is ``[first[h], tail[h']]`` for its
    hash h."""
    rng = random.Random(seed)
    tails, packed_tails = [], []
    for _ in range(POOL):
        vector = [rng.gauss(0.0, 1.0) for _ in range(dimension)]
        norm = math.sqrt(sum(x * x for x in vector))
        tail = [x / norm for x in vector[1:]]
        tails.append(",".join(format(x, ".8g") for x in tail))
        packed_tails.append(struct.pack(f"<{len(tail)}f", *tail))
    firsts = [rng.gauss(0.0, 1.0) / math.sqrt(dimension) for _ in range(POOL)]
    return (
        [format(x, ".8g") for x in firsts],
        tails,
        [struct.pack("<f", x) for x in firsts],
        packed_tails,
    )


def serve(dimension: int) -> None:
    firsts, tails, packed_firsts, packed_tails = pooled_vectors(dimension)

    def pooled(text: str) -> tuple[int, int]:
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest[:4], "little") % POOL, int.from_bytes(
            digest[4:], "little"
        ) % POOL

    def vectors(texts: list[str]) -> list[str]:
        return [f"[{firsts[h]},{tails[t]}]" for h, t in map(pooled, texts)]

    def packed(texts: list[str]) -> list[bytes]:
        return [packed_firsts[h] + packed_tails[t] for h, t in map(pooled, texts)]

    def batch_seconds(path: str, size: int) -> float:
        rate = _RATE.match(path)
        return size / float(rate.group(1)) if rate else 0.0

    server = EmbeddingServer(vectors, batch_seconds, record=False, packed=packed)
    print(json.dumps({"url": server.url}), flush=True)
    server.serve_forever(poll_interval=0.1)


class RemoteEmbedderServer:
    """The server process, for the length of a ``with`` block."""

    def __init__(self, dimension: int = 384) -> None:
        self.dimension = dimension
        self._process: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> RemoteEmbedderServer:
        self._process = subprocess.Popen(
            [sys.executable, __file__, "--dimension", str(self.dimension)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        self.url = json.loads(self._process.stdout.readline())["url"]
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(10)

    def runtime_file(self, directory: Path, rate: float, **settings: Any) -> Path:
        """A runtime file whose embedder is this server at ``rate`` cards/s."""
        embedding = {
            "provider": "openai",
            "url": f"{self.url}/rate/{rate:g}/v1",
            "model": "simulated-gpu",
            "dimension": self.dimension,
            **settings,
        }
        path = directory / f"runtime-remote-{rate:g}.yaml"
        path.write_text(json.dumps({"workspace": "bench", "embedding": embedding}) + "\n")
        return path

    def embedder(self, directory: Path, rate: float, **settings: Any) -> Embedder:
        """The product's ``openai`` embedder, built from that runtime file."""
        runtime = load_runtime_config(self.runtime_file(directory, rate, **settings))
        return build_embedder(runtime.embedding)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dimension", type=int, default=384)
    serve(parser.parse_args().dimension)


if __name__ == "__main__":
    main()
