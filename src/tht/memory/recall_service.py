"""Verified hybrid recall: search the projection, verify every hit against PostgreSQL,
expand links, rank, and answer with cards rebuilt from PostgreSQL.

A hit counts only if its card exists in the requested workspace, has no pending
operation, and both the point and the recorded projection carry the card's current
revision and the running fingerprint; it must also pass the filters on the archive's
own data. Index payloads are never returned.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tht.errors import InvalidInput, NotFound
from tht.memory.archive.port import Archive, ArchiveTx, IndexedFields, RecallFacts, SeedFacts
from tht.memory.embedding import Embedder, SparseEncoder, SparseVector
from tht.memory.embedding.sparse import text_language, without_stopwords
from tht.memory.index import IndexHit, IndexUnavailable, SearchIndex
from tht.memory.index.errors import IndexLost
from tht.memory.model import (
    MAX_CONCEPT,
    TEXT_FIELDS,
    Card,
    Dependency,
    card_id_to_uuid,
    uuid_to_card_id,
)
from tht.memory.projection_format import ProjectionFormat, indexed_text, searchable
from tht.memory.recall import (
    RankedCard,
    RecallTuning,
    SeedSignals,
    number_words_as_digits,
    order_seeds,
    rank_recall,
    seed_count,
    title_name,
)
from tht.memory.recall_explain import Explanation, exclusion, ranked
from tht.memory.recall_filters import (
    CLARIFICATION_FAMILIES,
    EXEMPLAR_FAMILIES,
    REUSABLE_FAMILIES,
    RULE_FAMILIES,
    RecallFilters,
    card_matches,
)
from tht.validation import describe_validation_error, validation_details

MAX_QUESTION = 2_000
EXPLAIN_DEPTH = 1_000  # candidates per branch `--explain` looks through for a card's ranks
DEFAULT_TOP = 10
TITLE_CACHE = 10_000  # titles whose named terms a RecallService keeps
RecallKind = Literal["search", "rules", "solved"]
FAMILIES_OF: dict[str, tuple[str, ...]] = {
    # F2 consumes domain clarifications (the spec); rules are `memory rules`' (F4/F6/F7)
    "search": CLARIFICATION_FAMILIES,
    "rules": RULE_FAMILIES,  # F4/F6/F7: SQL rules and explained errors
    "solved": EXEMPLAR_FAMILIES,  # consultative exemplars
}
# what `--filters {"families": [...]}` may ask of each command: search may be widened
# explicitly to every reusable family; rules and solved-search only narrowed
WIDEST_FAMILIES_OF: dict[str, tuple[str, ...]] = {
    "search": REUSABLE_FAMILIES,
    "rules": RULE_FAMILIES,
    "solved": EXEMPLAR_FAMILIES,
}


class RecallQuery(BaseModel):
    """`--filters` of the recall commands: it can narrow, never widen, the binding."""

    model_config = ConfigDict(extra="forbid")

    scope: str | None = Field(default=None, min_length=1, max_length=300)
    concepts: list[str] = Field(default_factory=list, max_length=50)
    # None: the command's own families (search: domain clarifications only)
    families: list[str] | None = Field(default=None, min_length=1, max_length=3)
    table: str | None = Field(default=None, min_length=1, max_length=128)
    column: str | None = Field(default=None, min_length=1, max_length=128)
    top: int = Field(default=DEFAULT_TOP, ge=1, le=100)

    @model_validator(mode="before")
    @classmethod
    def _binding_is_fixed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            overridden = sorted({"database", "schema"} & set(data))
            if overridden:
                raise ValueError(
                    f"{' and '.join(overridden)} {'come' if len(overridden) > 1 else 'comes'} from the runtime"
                    " file and cannot be overridden by --filters"
                )
            for concept in data.get("concepts") or []:
                if not isinstance(concept, str) or not 1 <= len(concept) <= MAX_CONCEPT:
                    raise ValueError("concepts must be non-empty strings of at most 100 characters")
        return data

    @model_validator(mode="after")
    def _column_needs_table(self) -> RecallQuery:
        if self.column and not self.table:
            raise ValueError("a column filter needs a table filter")
        if self.families is not None:
            unknown = sorted(set(self.families) - set(REUSABLE_FAMILIES + EXEMPLAR_FAMILIES))
            if unknown:
                raise ValueError(f"unknown families: {', '.join(unknown)}")
        return self

    def families_for(self, kind: RecallKind) -> tuple[str, ...]:
        """The families this query recalls with ``kind``: the command's own, or the
        explicit ``families`` filter, which must stay within what the command serves."""
        if self.families is None:
            return FAMILIES_OF[kind]
        allowed = WIDEST_FAMILIES_OF[kind]
        refused = sorted(set(self.families) - set(allowed))
        if refused:
            raise InvalidInput(
                f"families {', '.join(refused)} are not recalled by this command"
                f" (it serves {', '.join(allowed)})",
                details={"families": refused, "allowed": list(allowed)},
            )
        return tuple(f for f in allowed if f in self.families)


def parse_recall_query(document: Any) -> RecallQuery:
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise InvalidInput("filters must be a JSON object")
    try:
        return RecallQuery.model_validate(document)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(exc), details=validation_details(exc)) from exc


@dataclass(frozen=True)
class RecallResult:
    card: Card
    ranked: RankedCard
    hit: IndexHit | None  # the direct hit, if the card was one

    @property
    def similarity(self) -> float | None:
        """The cosine similarity of the question and the card's dense match, rounded to
        three places: the relevance signal an agent may threshold (docs/recall.md);
        None for a card reached only through a link."""
        similarity = self.hit.similarity if self.hit else None
        return round(similarity, 3) if similarity is not None else None

    def as_json(self) -> dict[str, Any]:
        data = self.card.as_json()
        data.pop("incoming_links", None)
        origin = (
            "direct"
            if self.ranked.hops == 0
            else ("link" if self.ranked.seed_rank is None else "direct+link")
        )
        data["score"] = self.ranked.score
        data["retrieval"] = {
            "path": list(self.ranked.path),
            "via": origin,
            "seed_rank": self.ranked.seed_rank,
            "dense_rank": self.hit.dense_rank if self.hit else None,
            "bm25_rank": self.hit.bm25_rank if self.hit else None,
            # which dense projection matched: the card's text, or an explained error's
            # symptom (the difference between "about your topic" and "explains your error")
            "matched_kind": self.hit.matched_kind if self.hit else None,
            "similarity": self.similarity,
            "hops": self.ranked.hops,
            "meanings": list(self.ranked.meanings),
        }
        return data


class RecallService:
    def __init__(
        self,
        archive: Archive,
        index: SearchIndex,
        embedder: Embedder,
        projection_format: ProjectionFormat,
        tuning: RecallTuning | None = None,
    ) -> None:
        self.tuning = tuning or RecallTuning()
        self.archive = archive
        self.index = index
        self.embedder = embedder
        self.projection_format = projection_format  # the encoder and fingerprint
        self._languages: dict[str, str] = {}  # a workspace's language never changes
        # the terms of what a title names, by analyzer, markers and title: the same cards come
        # back as seeds, and their titles cost a regular expression and an analysis each
        self._titles: dict[tuple[str, tuple[str, ...], str], frozenset[int]] = {}

    def of(self, workspace: str) -> RecallService:
        """The recall of ``workspace``: this one serves every workspace it is given."""
        return self

    def _language(self, workspace: str) -> str:
        if workspace not in self._languages:
            with self.archive.transaction(workspace) as tx:
                self._languages[workspace] = tx.require_workspace().language
        return self._languages[workspace]

    def recall(
        self,
        workspace: str,
        question: str,
        kind: RecallKind,
        *,
        database: str | None = None,
        schema: str | None = None,
        query: RecallQuery | None = None,
        exclude: frozenset[uuid.UUID] = frozenset(),
    ) -> list[RecallResult]:
        question = (question or "").strip()
        if not question:
            raise InvalidInput("the question is empty")
        if len(question) > MAX_QUESTION:
            raise InvalidInput(f"the question is longer than {MAX_QUESTION} characters")
        query = query or RecallQuery()
        language = self._language(workspace)
        filters = self.filters(workspace, kind, database, schema, query)
        dense = self.embedder.embed_query(question)
        sparse, crossing = self._bm25_query(question, language)
        if not self.index.collection_exists():
            self._raise_unless_empty(workspace)
            return []  # nothing was ever indexed, and the workspace has no card to find
        current = self.projection_format.fingerprint(language)
        # Content, links and eligibility are read under the workspace lock (shared
        # with other readers), so no mutation interleaves with verification; the index
        # is held first (one lock order with writers).
        with self.index.session():
            seeds = max(seed_count(query.top), self.tuning.seeds_at_least)
            hits = self.index.hybrid_search(dense, sparse, filters, limit=seeds)
            if not hits:
                self._raise_if_lost(workspace)
            return self._verified(
                workspace,
                filters,
                hits,
                current,
                query,
                exclude,
                sparse,
                self.projection_format.encoder(language),
                coverage=self.tuning.coverage
                and (not crossing or self.tuning.coverage_across_languages),
                bm25_weight=self.tuning.bm25_weight_across_languages if crossing else 1.0,
                feedback=self.tuning.feedback_across_languages
                if crossing
                else self.tuning.feedback,
            )

    def _title_terms(self, encoder: SparseEncoder, title: str) -> frozenset[int]:
        key = (encoder.settings_id, self.tuning.title_markers, title)
        terms = self._titles.get(key)
        if terms is None:
            if len(self._titles) >= TITLE_CACHE:
                self._titles.clear()  # bounded: a few MB at most
            terms = frozenset(
                encoder.encode_document(title_name(title, self.tuning.title_markers)).indices
            )
            self._titles[key] = terms
        return terms

    def _bm25_query(self, question: str, language: str) -> tuple[SparseVector, bool]:
        """The BM25 query, and whether the question is in another language than the
        workspace's. BM25 sees the question as the cards' indexed text sees identifiers;
        a question in another language (ours, ``tuning.language_aware``) first loses
        that language's stop words, which the workspace's analyzer would keep as terms
        ("the" in an Italian workspace, "di" in an English one). Its numbers written as
        words get their digits beside them (``number_words_as_digits``, in the
        question's language), as knowledge writes them."""
        text = searchable(question)
        asked = text_language(question) if self.tuning.language_aware else None
        crossing = asked is not None and asked != language
        if self.tuning.number_words:
            text = number_words_as_digits(text, asked or language)
        if crossing and asked is not None:
            text = without_stopwords(text, asked)
        return self.projection_format.encoder(language).encode_query(text), crossing

    def explain(
        self,
        workspace: str,
        question: str,
        kind: RecallKind,
        card_id: str,
        results: list[RecallResult],
        *,
        database: str | None = None,
        schema: str | None = None,
        query: RecallQuery | None = None,
        exclude: frozenset[uuid.UUID] = frozenset(),
        strict: bool = True,
    ) -> Explanation:
        """Why ``card_id`` is or is not among ``results`` (the answer of the same
        ``recall``); see ``tht.memory.recall_explain``. A card that is not in the
        workspace (malformed, deleted, another workspace's) raises what ``memory show``
        raises, or with ``strict=False`` is explained as ``not_found``."""
        card_uuid = card_id_to_uuid(card_id)  # InvalidInput on a malformed id, as show
        card_id = uuid_to_card_id(card_uuid)
        query = query or RecallQuery()
        for rank, result in enumerate(results, start=1):
            if result.card.id == card_id:
                hit = result.hit
                return ranked(
                    card_id,
                    rank=rank,
                    top=query.top,
                    dense_rank=hit.dense_rank if hit else None,
                    bm25_rank=hit.bm25_rank if hit else None,
                    depth=seed_count(query.top),
                )
        language = self._language(workspace)
        filters = self.filters(workspace, kind, database, schema, query)
        current = self.projection_format.fingerprint(language)
        with self.archive.transaction(workspace, lock="shared") as tx:
            facts = tx.recall_facts([card_uuid]).get(card_uuid)
        if facts is None:
            if not strict:
                return Explanation(card_id, "not_found", {})
            raise NotFound(
                f"card {card_id} does not exist in workspace '{workspace}'", details={"id": card_id}
            )
        state, card = facts
        excluded = exclusion(card_id, card, state, filters, current, decided=card_uuid in exclude)
        if excluded is not None:
            return excluded
        # eligible, yet not returned: where each branch ranks it among the eligible cards
        dense = self.embedder.embed_query(question.strip())
        sparse, _ = self._bm25_query(question, language)
        with self.index.session():
            hits = self.index.hybrid_search(dense, sparse, filters, limit=EXPLAIN_DEPTH)
        hit = next((h for h in hits if h.id == card_uuid), None)
        return ranked(
            card_id,
            rank=None,
            top=query.top,
            dense_rank=hit.dense_rank if hit else None,
            bm25_rank=hit.bm25_rank if hit else None,
            depth=EXPLAIN_DEPTH,
        )

    def filters(
        self,
        workspace: str,
        kind: RecallKind,
        database: str | None,
        schema: str | None,
        query: RecallQuery,
    ) -> RecallFilters:
        """What a recall of ``kind`` may return: the query's filters within the binding."""
        return RecallFilters(
            workspace=workspace,
            families=query.families_for(kind),
            scope=query.scope,
            concepts=tuple(query.concepts),
            database=database,
            schema_name=schema,
            table=query.table,
            column=query.column,
        )

    def _raise_unless_empty(self, workspace: str) -> None:
        """Without a collection, no results is the answer only for a workspace without
        cards (a new installation); cards there were never projected (an index that was
        down for every save): rebuilding finds them."""
        with self.archive.transaction(workspace) as tx:
            has_cards = bool(tx.card_ids_after(uuid.UUID(int=0), 1))
        if has_cards:
            raise IndexUnavailable("the search index has no collection yet: run `tht memory index`")

    def _raise_if_lost(self, workspace: str) -> None:
        """Reading never silently falls back: an empty search is an answer only if the
        index holds what the archive says it does. Checked only when nothing was found
        (a probe of the archive and a point count), so a search with hits pays nothing."""
        with self.archive.transaction(workspace) as tx:
            projected = tx.has_projections()
        if projected and self.index.count(workspace) == 0:
            raise IndexLost(
                f"the search index holds no point of workspace '{workspace}' although the archive records"
                " indexed cards (its storage was removed or replaced); run `tht memory index` to rebuild it",
                details={"workspace": workspace},
            )

    def _verified(
        self,
        workspace: str,
        filters: RecallFilters,
        hits: list[IndexHit],
        current: str,
        query: RecallQuery,
        exclude: frozenset[uuid.UUID],
        sparse: SparseVector,
        encoder: SparseEncoder,
        *,
        coverage: bool,
        bm25_weight: float,
        feedback: int,
    ) -> list[RecallResult]:
        with self.archive.transaction(workspace, lock="shared") as tx:
            verifier = _Verifier(tx, filters, current, exclude)
            seeds, read = verifier.seeds(hits)
            signals = []
            for hit in seeds:
                # the coverage signal: the terms of the seed's BM25 vector, recorded with
                # its projection (verified to be the card's current one)
                terms = read.terms.get(hit.id)
                if terms is None:  # recorded before migration 006: from the card's fields
                    text = indexed_text(
                        _indexed_card(read.fields[hit.id], verifier.dependencies(hit.id))
                    )
                    terms = frozenset(encoder.encode_document(text).indices)
                signals.append(
                    SeedSignals(
                        uuid_to_card_id(hit.id),
                        hit.dense_rank,
                        hit.bm25_rank,
                        terms,
                    )
                )
            # the terms of what the titles name, through the workspace's analyzer as
            # the question's (some 30 titles a recall, each analysed once: _title_terms)
            titles = (
                {
                    uuid_to_card_id(hit.id): self._title_terms(encoder, read.titles[hit.id])
                    for hit in seeds
                }
                if self.tuning.titles
                else None
            )
            order = order_seeds(
                sparse.indices,
                signals,
                coverage=coverage,
                bm25_weight=bm25_weight,
                feedback=feedback,
                feedback_weight=self.tuning.feedback_weight,
                titles=titles,
                title_weight=self.tuning.title_weight,
            )
            ranking = rank_recall(
                order,
                top=query.top,
                links_of=verifier.links_of,
                eligible=verifier.eligible,
            )
            cards = tx.cards([card_id_to_uuid(r.card_id) for r in ranking.cards])
        hit_of = {uuid_to_card_id(h.id): h for h in seeds}
        return [
            RecallResult(cards[card_id_to_uuid(r.card_id)], r, hit_of.get(r.card_id))
            for r in ranking.cards
        ]


def _indexed_card(fields: IndexedFields, dependencies: tuple[Dependency, ...]) -> SimpleNamespace:
    """Just what ``indexed_text`` reads, from the archive's row (a pydantic model
    would cost more than the text itself)."""
    texts: Mapping[str, object] = fields  # the row holds every text field, by name
    return SimpleNamespace(
        **{name: texts[name] for name in TEXT_FIELDS},
        title=fields["title"],
        concepts=fields["concepts"] or [],
        dependencies=dependencies,
    )


class _Verifier:
    """Eligibility of cards inside one archive transaction, one query per batch."""

    def __init__(
        self,
        tx: ArchiveTx,
        filters: RecallFilters,
        fingerprint: str,
        exclude: frozenset[uuid.UUID],
    ) -> None:
        self.tx = tx
        self.filters = filters
        self.fingerprint = fingerprint
        self.exclude = exclude
        self._facts: dict[uuid.UUID, RecallFacts] = {}
        # outgoing links already read, by source (the seeds' come with their facts)
        self._links: dict[uuid.UUID, list[tuple[uuid.UUID, str]]] = {}

    def _eligible_ids(self, ids: list[uuid.UUID]) -> set[uuid.UUID]:
        missing = [i for i in ids if i not in self._facts]
        if missing:
            self._facts.update(self.tx.recall_facts(missing))
        return {
            i
            for i in ids
            if i in self._facts
            and i not in self.exclude
            and self._facts[i][0].current(self.fingerprint)
            and card_matches(self._facts[i][1], self.filters)
        }

    def seeds(self, hits: list[IndexHit]) -> tuple[list[IndexHit], SeedFacts]:
        """The eligible hits, and what was read about them (their terms, among others)."""
        ids = [h.id for h in hits]
        read = self.tx.seed_facts(ids)
        self._facts.update(read.target_facts)
        self._facts.update(read.facts)
        self._links.update({i: read.links.get(i, []) for i in ids})
        eligible = self._eligible_ids(ids)
        # the point itself must be the recorded projection of the current revision
        return [
            h
            for h in hits
            if h.id in eligible
            and h.revision == self._facts[h.id][0].revision
            and h.fingerprint == self.fingerprint
        ], read

    def dependencies(self, card_uuid: uuid.UUID) -> tuple[Dependency, ...]:
        return self._facts[card_uuid][1].dependencies

    def eligible(self, card_ids: list[str]) -> set[str]:
        return {
            uuid_to_card_id(i) for i in self._eligible_ids([card_id_to_uuid(c) for c in card_ids])
        }

    def links_of(self, card_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
        sources = [card_id_to_uuid(c) for c in card_ids]
        unread = [i for i in sources if i not in self._links]
        if unread:
            # the targets' facts come with the links: eligible() then asks nothing more
            links, facts = self.tx.links_with_facts(unread)
            self._facts.update(facts)
            self._links.update({i: links.get(i, []) for i in unread})
        return {
            uuid_to_card_id(source): [
                (uuid_to_card_id(t), meaning) for t, meaning in self._links[source]
            ]
            for source in sources
            if self._links[source]
        }
