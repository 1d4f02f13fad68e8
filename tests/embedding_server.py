"""A local OpenAI-compatible embeddings server (``POST /v1/embeddings``), for the tests of
the HTTP embedder and for the benchmarks' simulated remote embedder
(``bench/remote_embedder.py``). Not part of the product.

Each answer lists its items in reverse order (the API allows any order; the client must
place them by ``index``). What a vector is, and how long the server takes per batch,
are the caller's: ``vectors`` turns a batch's inputs into their embeddings as JSON
arrays (text), or ``packed`` as little-endian float32 bytes when a request asks for
base64 (``encoding_format``; derived from ``vectors`` if not given), ``batch_seconds`` gives the simulated model time of a batch from the
request path and its size; batches take that time one after another, as on one GPU.
"""

from __future__ import annotations

import base64
import json
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def small_vectors(texts: list[str]) -> list[str]:
    """[len(text), position in the batch, 1.0]: a test can tell where each vector went."""
    return [json.dumps([float(len(text)), float(i), 1.0]) for i, text in enumerate(texts)]


class EmbeddingServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        vectors: Callable[[list[str]], list[str]] = small_vectors,
        batch_seconds: Callable[[str, int], float] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
        packed: Callable[[list[str]], list[bytes]] | None = None,
    ) -> None:
        super().__init__((host, port), _Handler)
        self.vectors = vectors
        self.packed = packed or (
            lambda texts: [_float32(json.loads(v)) for v in self.vectors(texts)]
        )
        self.batch_seconds = batch_seconds
        self.record = record
        # "ok"; "slow": one more second before answering; "error": HTTP 500
        self.mode = "ok"
        # what it does with ``encoding_format: base64``: "openai" answers base64;
        # "floats" ignores the parameter (as Ollama does); "strict" refuses it (HTTP 422)
        self.encoding = "openai"
        self.requests: list[dict[str, Any]] = []
        self.model_time = threading.Lock()  # one batch at a time, as on one GPU
        self.called = threading.Event()  # set by the first request
        self.in_flight = 0  # requests being answered, and the most at once
        self.most_in_flight = 0
        self._counting = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A slow answer can come after the client gave up: a broken pipe is expected.
        pass

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> threading.Thread:
        """Serve in a daemon thread; ``stop`` ends it."""
        thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        thread.start()
        return thread

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: EmbeddingServer
    protocol_version = "HTTP/1.1"  # keep-alive: a client reuses its connections

    def log_message(self, *args: Any) -> None:  # keep the output clean
        pass

    def do_POST(self) -> None:
        server = self.server
        with server._counting:
            server.in_flight += 1
            server.most_in_flight = max(server.most_in_flight, server.in_flight)
        try:
            self._answer()
        finally:
            with server._counting:
                server.in_flight -= 1

    def _answer(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        if server.record:
            server.requests.append(
                {
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "body": body,
                }
            )
        server.called.set()
        texts = body["input"]
        if server.batch_seconds is not None:
            seconds = server.batch_seconds(self.path, len(texts))
            with server.model_time:
                time.sleep(seconds)
        if server.mode == "slow":
            time.sleep(1.0)
        if server.mode == "error":
            self._send(500, json.dumps({"error": "model crashed"}).encode())
            return
        asked = body.get("encoding_format", "float")
        if server.encoding == "strict" and "encoding_format" in body:
            self._send(422, json.dumps({"detail": "extra field: encoding_format"}).encode())
            return
        if asked == "base64" and server.encoding == "openai":
            vectors = [
                json.dumps(base64.b64encode(packed).decode("ascii"))
                for packed in server.packed(texts)
            ]
        else:
            vectors = server.vectors(texts)
        items = [
            f'{{"object":"embedding","index":{i},"embedding":{vector}}}'
            for i, vector in reversed(list(enumerate(vectors)))
        ]
        model = json.dumps(body["model"])
        self._send(200, f'{{"object":"list","data":[{",".join(items)}],"model":{model}}}'.encode())

    def _send(self, status: int, payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _float32(vector: list[float]) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)
