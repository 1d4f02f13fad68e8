"""The Python client: ``from tht import Memory``.

    memory = Memory.connect("runtime.yaml")          # token: THT_TOKEN(_FILE), or none
    for hit in memory.search("orders shipped last month"):
        print(hit.card.title, hit.score)

A thin face like the CLI: each method is the ``tht memory`` command of the same name
(``tht.commands.table``), run in the installation's service (auto-started as the CLI does; or
``THT_SERVICE_URL`` with a token), or with ``THT_SERVICE=off`` in this process, on
engines it keeps warm until ``close``. The answers are the CLI's documents, read into
frozen dataclasses; each keeps the document it was read from as ``raw``. A command's
error is raised as the error class of its code (``tht.errors``: ``Forbidden``,
``NotFound``, ``InvalidInput``, ...).

The runtime file names the workspace (and the DWH binding), as for the CLI; a token is the agent's, and without one the caller is the operator.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tht.errors import InvalidInput, ThothError
from tht.service.commands import CommandRunner

Document = Mapping[str, Any]


def _when(text: Any) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) else None


@dataclass(frozen=True)
class Dependency:
    """A physical object the card depends on (each level needs the one above)."""

    database: str
    schema: str | None = None
    table: str | None = None
    column: str | None = None

    @classmethod
    def from_json(cls, document: Document) -> Dependency:
        return cls(
            document["database"],
            document.get("schema"),
            document.get("table"),
            document.get("column"),
        )


@dataclass(frozen=True)
class Link:
    """An outgoing link: the target card and what the link means."""

    target: str
    meaning: str
    target_title: str | None = None

    @classmethod
    def from_json(cls, document: Document) -> Link:
        return cls(document["target"], document["meaning"], document.get("target_title"))


@dataclass(frozen=True)
class Card:
    """A card as the archive holds it (``tht memory show``, recall results, export)."""

    id: str
    workspace: str
    family: str
    title: str
    content: str | None
    scope: str | None
    rationale: str | None
    question: str | None
    sql: str | None
    context: str | None
    error_signature: str | None
    concepts: tuple[str, ...]
    dependencies: tuple[Dependency, ...]
    links: tuple[Link, ...]
    origin: str | None
    source: Mapping[str, Any] | None
    revision: int | None
    created_at: datetime | None
    updated_at: datetime | None
    raw: Document = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, document: Document) -> Card:
        return cls(
            id=document["id"],
            workspace=document.get("workspace", ""),
            family=document["family"],
            title=document["title"],
            content=document.get("content"),
            scope=document.get("scope"),
            rationale=document.get("rationale"),
            question=document.get("question"),
            sql=document.get("sql"),
            context=document.get("context"),
            error_signature=document.get("error_signature"),
            concepts=tuple(document.get("concepts") or ()),
            dependencies=tuple(Dependency.from_json(d) for d in document.get("dependencies") or ()),
            links=tuple(Link.from_json(link) for link in document.get("links") or ()),
            origin=document.get("origin"),
            source=document.get("source"),
            revision=document.get("revision"),
            created_at=_when(document.get("created_at")),
            updated_at=_when(document.get("updated_at")),
            raw=document,
        )


@dataclass(frozen=True)
class Retrieval:
    """How recall found a card: directly (its dense and BM25 ranks), through links
    from a direct hit (path, hops, meanings), or by an exact error signature."""

    via: str
    path: tuple[str, ...]
    hops: int
    meanings: tuple[str, ...]
    seed_rank: int | None
    dense_rank: int | None
    bm25_rank: int | None
    matched_kind: str | None

    @classmethod
    def from_json(cls, document: Document) -> Retrieval:
        return cls(
            via=document["via"],
            path=tuple(document.get("path") or ()),
            hops=document.get("hops", 0),
            meanings=tuple(document.get("meanings") or ()),
            seed_rank=document.get("seed_rank"),
            dense_rank=document.get("dense_rank"),
            bm25_rank=document.get("bm25_rank"),
            matched_kind=document.get("matched_kind"),
        )


@dataclass(frozen=True)
class Hit:
    """One recall result: the card rebuilt from the archive, its ranking score (not a
    similarity; None for an exact error-signature match) and how it was found."""

    card: Card
    score: float | None
    retrieval: Retrieval
    raw: Document = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, document: Document) -> Hit:
        return cls(
            Card.from_json(document),
            document.get("score"),
            Retrieval.from_json(document["retrieval"]),
            document,
        )


@dataclass(frozen=True)
class Recall(Sequence[Hit]):
    """The results of search, rules or solved_search, best first. With ``rules(error=)``
    also the error's normalized signature, how many results matched it exactly, and
    why recall failed after exact matches were found (``recall_error``)."""

    hits: tuple[Hit, ...]
    error_signature: str | None = None
    exact: int | None = None
    recall_error: Mapping[str, Any] | None = None
    raw: Document = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, document: Document) -> Recall:
        return cls(
            tuple(Hit.from_json(hit) for hit in document["results"]),
            document.get("error_signature"),
            document.get("exact"),
            document.get("recall_error"),
            document,
        )

    def __getitem__(self, index: Any) -> Any:
        return self.hits[index]

    def __len__(self) -> int:
        return len(self.hits)

    def __iter__(self) -> Iterator[Hit]:
        return iter(self.hits)


@dataclass(frozen=True)
class Proposed:
    """One recorded proposal: what it does to which card."""

    id: str
    action: str
    family: str
    card_id: str | None = None


@dataclass(frozen=True)
class Proposals:
    """``propose``'s answer: the session's proposals as recorded, and their digest (a
    review names it)."""

    session: str
    workspace: str
    recorded: str
    digest: str
    proposals: tuple[Proposed, ...]
    raw: Document = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, document: Document) -> Proposals:
        return cls(
            document["session"],
            document["workspace"],
            document["recorded"],
            document["digest"],
            tuple(
                Proposed(p["id"], p["action"], p["family"], p.get("card_id"))
                for p in document["proposals"]
            ),
            document,
        )


@dataclass(frozen=True)
class Summary:
    """The reviewer's editable summary of a session (``tht memory summary``); its
    sections are the command's objects."""

    session: str
    workspace: str
    gate: str
    proposals_digest: str
    additions: tuple[Document, ...]
    updates: tuple[Document, ...]
    solved_question: Document | None
    links: tuple[Document, ...]
    reused: tuple[Document, ...]
    reviewed: Document | None
    raw: Document = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, document: Document) -> Summary:
        return cls(
            document["session"],
            document["workspace"],
            document["gate"],
            document["proposals_digest"],
            tuple(document.get("additions") or ()),
            tuple(document.get("updates") or ()),
            document.get("solved_question"),
            tuple(document.get("links") or ()),
            tuple(document.get("reused") or ()),
            document.get("reviewed"),
            document,
        )


@dataclass(frozen=True)
class ImportSummary:
    """``tht memory import``'s summary: how many records were created, updated,
    skipped and invalid (None where the summary does not say), whether it was a dry
    run; the whole summary (per-line reports, counts by family) is ``raw``."""

    created: int | None
    updated: int | None
    skipped: int | None
    invalid: int | None
    dry_run: bool
    raw: Document = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, document: Document) -> ImportSummary:
        def count(name: str) -> int | None:
            value = document.get(name)
            if isinstance(value, list):
                return len(value)
            return value if isinstance(value, int) else None

        return cls(
            count("created"),
            count("updated"),
            count("skipped"),
            count("invalid"),
            bool(document.get("dry_run", False)),
            document,
        )


class Memory:
    """One workspace's Memory (its runtime file) for one principal."""

    def __init__(self, config: str, runner: CommandRunner) -> None:
        self.config = config
        self._runner = runner

    @classmethod
    def connect(cls, config: str | os.PathLike[str], token: str | None = None) -> Memory:
        """The workspace of runtime file ``config``. ``token``: an agent's (or user's)
        API token; None takes THT_TOKEN_FILE or THT_TOKEN, and without either the
        caller is the operator (the installation's own user)."""
        path = os.path.abspath(os.fspath(config))
        if not os.path.isfile(path):
            raise InvalidInput(f"the runtime file {config} does not exist")
        if token is None:
            from tht.service.client import read_token

            token = read_token([], os.environ)[1]
        return cls(path, CommandRunner(token=token))

    # --- recall ---------------------------------------------------------------------

    def search(
        self,
        question: str,
        *,
        filters: Mapping[str, Any] | None = None,
        top: int | None = None,
        session: str | None = None,
        explain: str | None = None,
    ) -> Recall:
        """Domain clarifications for a question (``tht memory search``). ``filters``:
        scope, concepts, table, column, top, families (widens to SQL rules and explained
        errors). ``explain``: a card id; ``.raw["explain"]`` says why it is or is not
        among the results."""
        return Recall.from_json(
            self._agent(
                "search",
                question=question,
                filters=_with_top(filters, top),
                session=session,
                explain=explain,
            )
        )

    def rules(
        self,
        question: str | None = None,
        *,
        error: str | None = None,
        filters: Mapping[str, Any] | None = None,
        top: int | None = None,
        session: str | None = None,
        explain: str | None = None,
    ) -> Recall:
        """SQL rules and explained errors for a question, or for a database ``error``
        (exact error-signature matches first). ``explain``, with a question and no
        ``error``: as ``search``'s."""
        return Recall.from_json(
            self._agent(
                "rules",
                question=question,
                error=error,
                filters=_with_top(filters, top),
                session=session,
                explain=explain,
            )
        )

    def solved_search(
        self,
        question: str,
        *,
        filters: Mapping[str, Any] | None = None,
        top: int | None = None,
        explain: str | None = None,
    ) -> Recall:
        """Solved questions like this one: consultative exemplars, never an approval.
        ``explain``: as ``search``'s."""
        return Recall.from_json(
            self._agent(
                "solved-search",
                question=question,
                filters=_with_top(filters, top),
                explain=explain,
            )
        )

    # --- the workflow's side -----------------------------------------------------------

    def propose(self, session: str, proposals: Mapping[str, Any]) -> Proposals:
        """Validate and record a session's Memory proposals (memory_proposals.json)."""
        return Proposals.from_json(self._agent("propose", session=session, data=dict(proposals)))

    def summary(self, session: str) -> Summary:
        """The reviewer's editable summary of a session's proposals."""
        return Summary.from_json(self._agent("summary", session=session))

    # --- bulk ---------------------------------------------------------------------------

    def import_cards(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,
        dry_run: bool = False,
        on_conflict: str | None = None,
    ) -> ImportSummary:
        """``tht memory import``: a file of cards (jsonl, csv) or another tool's training
        data (vanna, wrenai, bird); ``format`` defaults to the file's extension,
        ``on_conflict`` is skip, update or fail."""
        args: dict[str, Any] = {
            "file": os.path.abspath(os.fspath(path)),
            "config": self.config,
            "fmt": format,
            "dry_run": dry_run,
        }
        if on_conflict is not None:
            args["on_conflict"] = on_conflict
        return ImportSummary.from_json(
            self._document(*self._runner.run_command("memory.import", args))
        )

    def export_cards(self) -> tuple[Card, ...]:
        """``tht memory export``: every card of the workspace, lossless (ids, fields,
        dependencies, links, origin, source, revision, timestamps)."""
        documents: list[Any] = []
        partial = [""]  # a line not yet ended: the output arrives in pieces

        def take(text: str) -> None:  # parsed as it comes: the export's text is never held whole
            *ended, partial[0] = (partial[0] + text).split("\n")
            documents.extend(json.loads(line) for line in ended if line.strip())

        code = self._runner.run_command_streamed(
            "memory.export", {"config": self.config, "fmt": "jsonl"}, take
        )
        take("\n")
        if code != 0:  # the error document is the last line, after the cards written
            self._document(code, documents[-1] if documents else {})
        return tuple(Card.from_json(document) for document in documents)

    # --- life ---------------------------------------------------------------------------

    def close(self) -> None:
        """End this process's engines (with ``THT_SERVICE=off``); the service's stay."""
        self._runner.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _agent(self, command: str, **arguments: Any) -> Document:
        """Command ``memory.<command>`` on this workspace; ``data``, a document, goes as
        its standard input."""
        args = {"config": self.config, **arguments}
        stdin = None
        if arguments.get("data") is not None:
            stdin = json.dumps(arguments["data"], ensure_ascii=False).encode()
            args["data"] = "-"
        args = {key: value for key, value in args.items() if value is not None}
        return self._document(*self._runner.run_command(f"memory.{command}", args, stdin=stdin))

    @staticmethod
    def _document(code: int, document: Any) -> Document:
        if code != 0:
            raise ThothError.from_dict(document, exit_code=code)
        answer: Document = document
        return answer


def _with_top(filters: Mapping[str, Any] | None, top: int | None) -> dict[str, Any] | None:
    if top is None:
        return dict(filters) if filters else None
    return {**(filters or {}), "top": top}
