"""A workspace's benchmark: the curator's cases (a question and the cards recall
should find for it), run on demand, each run stored with its figures and misses.

Cases live in the archive (``benchmark_cases``): added one at a time (the page's
"this question should find this card", ``tht memory benchmark add``) or imported from
the JSON Lines ``tht memory eval --cases`` reads (``tht.memory.evaluation``). A case
names cards of its own workspace only: any other id (another workspace's card, a
deleted one, one never created) refuses the whole addition, naming it (not_found). One case per
command, question and filters: adding the same question again adds its cards to the
case (``replace``: sets them), and records each card's revision then.

A run asks every case as the agent would (the case's command and filters, the
workspace's binding, at least ``MISS_K`` results) and stores the figures overall and
per command, each case's ranks, each miss with recall's reason for every missing
card (``tht.memory.recall_explain``), the expected cards changed or deleted since
their case was written (reported, still counted: a deleted card is a miss), how the
index served it, and how it compares with the run before on the cases both measured
with the same expected cards: a run with a lower figure there is *worse*.

Recall reads the serving generation of the index: a run during a rebuild of the
workspace measures what agents get meanwhile, and says that a rebuild was running.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, cast

from tht import audit
from tht.errors import Conflict, InvalidInput, NotFound
from tht.memory.archive.port import Archive, NewCase
from tht.memory.embedding.ahead import embedding_ahead
from tht.memory.evaluation import (
    KS,
    MAX_CASES,
    MISS_K,
    EvalCase,
    parse_case,
    parse_cases,
    report,
    summarize,
)
from tht.memory.model import card_id_to_uuid, uuid_to_card_id
from tht.memory.recall_service import RecallKind, RecallQuery, parse_recall_query

if TYPE_CHECKING:
    from tht.memory.recall_service import RecallResult, RecallService

CASE_PREFIX = "case-"
RUN_PREFIX = "bench-"
CASE_ID_PATTERN = r"^case-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
RUN_ID_PATTERN = r"^bench-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
KEPT_RUNS = 200  # per workspace: older runs are deleted
MAX_HISTORY = 200
EDIT_SAMPLE = 10  # card edits named per interval between runs (all are counted)
ORIGINS = ("manual", "miss", "gap", "import")


class RecallOf(Protocol):
    def of(self, workspace: str) -> RecallService: ...


class RebuildState(Protocol):
    def rebuilding_now(self, workspace: str) -> bool: ...

    def profile_of(self, workspace: str) -> str: ...


def case_id(value: uuid.UUID) -> str:
    return f"{CASE_PREFIX}{value}"


def run_id(value: uuid.UUID) -> str:
    return f"{RUN_PREFIX}{value}"


def _parse_id(text: str, prefix: str, what: str) -> uuid.UUID:
    if isinstance(text, str) and text.startswith(prefix):
        try:
            return uuid.UUID(text[len(prefix) :])
        except ValueError:
            pass
    raise InvalidInput(f"{text!r} is not a {what} id ({prefix}<uuid>)", details={"id": text})


def parse_case_id(text: str) -> uuid.UUID:
    return _parse_id(text, CASE_PREFIX, "benchmark case")


def parse_run_id(text: str) -> uuid.UUID:
    return _parse_id(text, RUN_PREFIX, "benchmark run")


def _key(command: str, question: str, filters: Mapping[str, Any]) -> tuple[str, str, str]:
    return command, question, json.dumps(dict(filters), sort_keys=True)


def _queries(cases: Sequence[EvalCase]) -> list[RecallQuery]:
    """Each case's recall query: its filters, checked for its command, asking at least
    ``MISS_K`` results (so that recall@10 and the misses mean what they say)."""
    queries = []
    for case in cases:
        try:
            query = parse_recall_query(case.filters)
            query.families_for(cast("RecallKind", case.command))
        except InvalidInput as exc:
            stored = case.name is not None and case.name.startswith(CASE_PREFIX)
            where = f"case {case.name}" if stored else f"cases line {case.line}"
            raise InvalidInput(
                f"{where}: {exc.message}",
                details={"line": case.line, "case": case.name, "filters": exc.details},
            ) from exc
        queries.append(query.model_copy(update={"top": max(query.top, MISS_K)}))
    return queries


def one_case(document: Mapping[str, Any]) -> EvalCase:
    """A case from a request's object (the keys of a cases file's line)."""
    try:
        return parse_case(json.dumps(dict(document)), 1)
    except InvalidInput as exc:
        message = exc.message.removeprefix("cases line 1: ")
        raise InvalidInput(f"invalid case: {message}", details=exc.details) from exc


def measure(
    recall: RecallService,
    workspace: str,
    cases: Sequence[EvalCase],
    *,
    database: str | None,
    schema: str | None,
) -> dict[str, Any]:
    """Ask every case; the evaluation document (``tht.memory.evaluation.report``) with
    each missing card's reason (what ``memory search --explain`` says) under
    ``misses[].reasons``, and every case's returned ids under ``returned``."""
    queries = _queries(cases)
    answers: list[list[RecallResult]] = []
    # the next questions are embedded while this one's recall waits on the database
    with embedding_ahead(recall.embedder, [case.question.strip() for case in cases]) as ahead:
        for case, query in zip(cases, queries, strict=True):
            answers.append(
                recall.recall(
                    workspace,
                    case.question,
                    cast("RecallKind", case.command),
                    database=database,
                    schema=schema,
                    query=query,
                )
            )
            ahead.done()
    returned = [[r.card.id for r in results] for results in answers]
    document = report(cases, returned)
    by_line = {
        case.line: (case, query, results)
        for case, query, results in zip(cases, queries, answers, strict=True)
    }
    for miss in document["misses"]:
        case, query, results = by_line[miss["line"]]
        miss["reasons"] = {
            card_id: recall.explain(
                workspace,
                case.question,
                cast("RecallKind", case.command),
                card_id,
                results,
                database=database,
                schema=schema,
                query=query.model_copy(update={"top": MISS_K}),
                strict=False,
            ).as_json()
            for card_id in miss["missing"]
        }
    document["returned"] = returned
    return document


def ranks_of_case(expected: Sequence[str], returned: Sequence[str]) -> dict[str, int | None]:
    """Each expected card's rank among the first ``MISS_K`` results (None: not there)."""
    first = returned[:MISS_K]
    return {card: (first.index(card) + 1 if card in first else None) for card in expected}


def figures(ranks: Sequence[Mapping[str, int | None]]) -> dict[str, float]:
    """recall@1/5/10 and MRR from each case's ranks (the run's stored form)."""
    pairs = []
    for case in ranks:
        expected = list(case)
        returned: list[str | None] = [None] * MISS_K
        for card, rank in case.items():
            if rank is not None:
                returned[rank - 1] = card
        pairs.append((expected, [c or "" for c in returned]))
    return summarize(pairs, KS)


def compare(
    previous: Mapping[str, Mapping[str, int | None]] | None,
    current: Mapping[str, Mapping[str, int | None]],
    previous_id: str | None,
) -> dict[str, Any] | None:
    """This run against the one before, on the cases both measured with the same
    expected cards: their figures then and now, the cases now missed that were not,
    those found now that were missed, and whether any figure went down."""
    if previous is None or previous_id is None:
        return None
    common = [c for c in current if c in previous and set(previous[c]) == set(current[c])]
    if not common:
        return {"previous": previous_id, "cases": 0, "worse": False}

    def missed(ranks: Mapping[str, int | None]) -> bool:
        return any(rank is None for rank in ranks.values())

    before = figures([previous[c] for c in common])
    after = figures([current[c] for c in common])
    return {
        "previous": previous_id,
        "cases": len(common),
        "before": before,
        "after": after,
        "newly_missed": [c for c in common if missed(current[c]) and not missed(previous[c])],
        "fixed": [c for c in common if missed(previous[c]) and not missed(current[c])],
        "worse": any(after[name] < before[name] for name in after),
    }


def _case_json(
    row: Mapping[str, Any], cards: Mapping[uuid.UUID, Mapping[str, Any]]
) -> dict[str, Any]:
    expected = []
    for card_uuid, then in zip(row["expected"], row["expected_revisions"], strict=True):
        now = cards.get(card_uuid)
        state = "deleted" if now is None else "changed" if now["revision"] != then else "current"
        expected.append(
            {
                "id": uuid_to_card_id(card_uuid),
                "title": now["title"] if now else None,
                "family": now["family"] if now else None,
                "revision_then": then,
                "revision_now": now["revision"] if now else None,
                "state": state,
            }
        )
    return {
        "id": case_id(row["id"]),
        "name": row["name"],
        "question": row["question"],
        "command": row["command"],
        "filters": row["filters"],
        "expected": expected,
        "origin": row["origin"],
        "created_by": row["created_by"],
        "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(),
    }


def _when(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


class Benchmarks:
    def __init__(self, archive: Archive, recall: RecallOf, index: RebuildState) -> None:
        self.archive = archive
        self.recall = recall
        self.index = index

    # --- cases --------------------------------------------------------------------------

    def add(
        self,
        workspace: str,
        cases: Sequence[EvalCase],
        *,
        origin: str = "manual",
        replace: bool = False,
    ) -> dict[str, Any]:
        """Write cases (one transaction: all or nothing); the same command, question and
        filters as a case there adds to its expected cards (``replace``: sets them, with
        their revisions now)."""
        if origin not in ORIGINS:
            raise InvalidInput(
                f"origin must be one of {', '.join(ORIGINS)}", details={"origin": origin}
            )
        if not cases:
            raise InvalidInput("no case to add")
        _queries(cases)
        principal = audit.actor()
        with self.archive.transaction(workspace, lock=True) as tx:
            tx.require_workspace()
            records = tx.curation
            wanted = list(
                dict.fromkeys(card_id_to_uuid(c) for case in cases for c in case.expected)
            )
            found = records.card_revisions(wanted)
            for case in cases:
                unknown = [c for c in case.expected if card_id_to_uuid(c) not in found]
                if unknown:
                    where = f"case {case.name}" if case.name else f"line {case.line}"
                    raise NotFound(
                        f"{where} expects {', '.join(unknown)}, not a card of workspace"
                        f" '{workspace}' (another workspace's, deleted, or never made): a case"
                        " names cards of its own workspace",
                        details={"line": case.line, "case": case.name, "cards": unknown},
                    )
            existing = {
                _key(row["command"], row["question"], row["filters"]): row
                for row in records.cases(MAX_CASES + 1)
            }
            new: dict[tuple[str, str, str], NewCase] = {}
            changed: dict[tuple[str, str, str], NewCase] = {}
            unchanged = 0
            for case in cases:
                key = _key(case.command, case.question, case.filters)
                now = {
                    card_id_to_uuid(c): found[card_id_to_uuid(c)]["revision"] for c in case.expected
                }
                if key in new:  # the same question twice in one addition
                    merged = dict(zip(new[key].expected, new[key].revisions, strict=True))
                    new[key] = _with(new[key], {**merged, **now} if not replace else now, case.name)
                    continue
                row = existing.get(key)
                if row is None:
                    new[key] = NewCase(
                        uuid.uuid4(),
                        case.name,
                        case.question,
                        case.command,
                        case.filters,
                        list(now),
                        list(now.values()),
                        origin,
                    )
                    continue
                base = changed.get(key) or _from_row(row)
                recorded = dict(zip(base.expected, base.revisions, strict=True))
                # merged: the cards there keep their revisions then, the new ones are added
                target = (
                    now
                    if replace
                    else {**recorded, **{c: r for c, r in now.items() if c not in recorded}}
                )
                if target == recorded and (case.name is None or case.name == row["name"]):
                    unchanged += 1
                    continue
                changed[key] = _with(base, target, case.name)
            if len(existing) + len(new) > MAX_CASES:
                raise InvalidInput(
                    f"a workspace keeps at most {MAX_CASES} benchmark cases"
                    f" ({len(existing)} there, {len(new)} new)",
                    details={"cases": len(existing), "new": len(new)},
                )
            records.insert_cases(list(new.values()), principal)
            records.update_cases(list(changed.values()))
            touched = [c.id for c in [*new.values(), *changed.values()]]
            rows = [records.case(i) for i in touched[:100]]
            cards = records.card_revisions(
                list({c for row in rows if row for c in row["expected"]})
            )
        return {
            "workspace": workspace,
            "created": len(new),
            "updated": len(changed),
            "unchanged": unchanged,
            "cases": [_case_json(row, cards) for row in rows if row],
        }

    def import_cases(self, workspace: str, text: str) -> dict[str, Any]:
        """Cases from JSON Lines (the format of ``tht memory eval --cases``): a bad line
        refuses the whole file, naming it; nothing is written."""
        return self.add(workspace, parse_cases(text), origin="import")

    def list_cases(self, workspace: str) -> dict[str, Any]:
        """Every case with the state of its expected cards (current, changed since the
        case was written, deleted)."""
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            rows = tx.curation.cases(MAX_CASES)
            cards = tx.curation.card_revisions(list({c for row in rows for c in row["expected"]}))
        items = [_case_json(row, cards) for row in rows]
        return {
            "workspace": workspace,
            "total": len(items),
            "changed": sum(1 for i in items if any(e["state"] != "current" for e in i["expected"])),
            "items": items,
        }

    def remove(self, workspace: str, case: str) -> dict[str, Any]:
        case_uuid = parse_case_id(case)
        with self.archive.transaction(workspace, lock=True) as tx:
            tx.require_workspace()
            if not tx.curation.delete_case(case_uuid):
                raise NotFound(
                    f"benchmark case {case} does not exist in workspace '{workspace}'",
                    details={"case": case},
                )
        return {"workspace": workspace, "deleted": case_id(case_uuid)}

    # --- runs ---------------------------------------------------------------------------

    def run(self, workspace: str, *, database: str | None, schema: str | None) -> dict[str, Any]:
        """Run every case and store the run (see the module's docstring)."""
        started_at = datetime.now(UTC)
        started = time.perf_counter()
        rebuilding = self.index.rebuilding_now(workspace)
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            rows = tx.curation.cases(MAX_CASES)
            previous = tx.curation.last_run()
        if not rows:
            raise Conflict(
                f"workspace '{workspace}' has no benchmark case yet: add one on the Recall quality"
                " page, with `tht memory benchmark add` or `tht memory benchmark import`",
                details={"workspace": workspace},
            )
        cases = [
            EvalCase(
                n,
                row["question"],
                tuple(uuid_to_card_id(c) for c in row["expected"]),
                row["command"],
                dict(row["filters"]),
                case_id(row["id"]),
            )
            for n, row in enumerate(rows, start=1)
        ]
        measured = measure(
            self.recall.of(workspace), workspace, cases, database=database, schema=schema
        )
        rebuilding = rebuilding or self.index.rebuilding_now(workspace)
        ranks = {
            case.name or "": ranks_of_case(case.expected, returned)
            for case, returned in zip(cases, measured["returned"], strict=True)
        }
        named = {
            card_id_to_uuid(c)
            for miss in measured["misses"]
            for c in (*miss["missing"], *miss["returned"])
        } | {c for row in rows for c in row["expected"]}
        new_id = uuid.uuid4()
        with self.archive.transaction(workspace) as tx:
            cards = tx.curation.card_revisions(list(named))
        titles = {uuid_to_card_id(i): row["title"] for i, row in cards.items()}
        misses = [
            {
                "case": miss["id"],
                "command": miss["command"],
                "question": miss["question"],
                "missing": [{"id": c, "title": titles.get(c)} for c in miss["missing"]],
                "ranks": miss["ranks"],
                "returned": [{"id": c, "title": titles.get(c)} for c in miss["returned"]],
                "reasons": miss["reasons"],
            }
            for miss in measured["misses"]
        ]
        changes = [
            entry | {"case": case_id(row["id"])}
            for row in rows
            for entry in _case_json(row, cards)["expected"]
            if entry["state"] != "current"
        ]
        document: dict[str, Any] = {
            "run": run_id(new_id),
            "workspace": workspace,
            "started_at": started_at,
            "seconds": round(time.perf_counter() - started, 3),
            "cases": len(cases),
            "metrics": measured["metrics"],
            "by_command": measured["by_command"],
            "ranks": ranks,
            "misses": misses,
            "expected_changes": changes,
            "index": {
                "embedder": self.index.profile_of(workspace),
                "binding": {"database": database, "schema": schema},
                "rebuilding": rebuilding,
                "generation": "serving",
                **(
                    {
                        "note": "a rebuild of the workspace's index was running: the run measured"
                        " the serving generation, what agents got meanwhile"
                    }
                    if rebuilding
                    else {}
                ),
            },
            "comparison": compare(
                previous["ranks"] if previous else None,
                ranks,
                run_id(previous["id"]) if previous else None,
            ),
        }
        with self.archive.transaction(workspace, lock=True) as tx:
            tx.curation.insert_run(new_id, audit.actor(), document)
            tx.curation.prune_runs(KEPT_RUNS)
        return {**document, "started_at": started_at.isoformat()}

    def runs(self, workspace: str, limit: int = 50) -> dict[str, Any]:
        """The latest runs, newest first, each with the card edits made since the run
        before it (from the audit log), and the edits since the last run."""
        if not 1 <= limit <= MAX_HISTORY:
            raise InvalidInput(
                f"limit must be between 1 and {MAX_HISTORY}", details={"limit": limit}
            )
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            rows = tx.curation.runs(limit + 1)  # one more: the edits before the oldest shown
        chronological = list(reversed(rows))
        intervals = [
            (earlier["started_at"], later["started_at"])
            for earlier, later in itertools.pairwise(chronological)
        ]
        if chronological:
            intervals.append((chronological[-1]["started_at"], datetime.now(UTC)))
        with self.archive.transaction(workspace, accounts=True) as tx:
            edits = tx.curation.card_edits(intervals, EDIT_SAMPLE)

        def edits_json(row: Mapping[str, Any]) -> dict[str, Any]:
            return {
                "count": int(row["edits"]),
                "latest": [{**e, "at": _when(e.get("at"))} for e in (row["latest"] or [])],
            }

        before = {
            n + 1: edits_json(row) for n, row in enumerate(edits)
        }  # interval i precedes run i
        items = []
        for n, row in enumerate(chronological):
            if n == 0 and len(rows) > limit:
                continue  # only there for the interval after it
            items.append(
                {
                    "run": run_id(row["id"]),
                    "principal": row["principal"],
                    "started_at": row["started_at"].isoformat(),
                    "seconds": row["seconds"],
                    "cases": row["cases"],
                    "metrics": row["metrics"],
                    "by_command": row["by_command"],
                    "misses": row["miss_count"],
                    "expected_changes": row["changed_count"],
                    "index": row["index_state"],
                    "comparison": row["comparison"],
                    "worse": bool((row["comparison"] or {}).get("worse")),
                    "edits_before": before.get(n) if n > 0 else None,
                }
            )
        return {
            "workspace": workspace,
            "runs": list(reversed(items)),
            "edits_since_last_run": before.get(len(chronological)) if chronological else None,
        }

    def show_run(self, workspace: str, run: str) -> dict[str, Any]:
        run_uuid = parse_run_id(run)
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            row = tx.curation.run(run_uuid)
        if row is None:
            raise NotFound(
                f"benchmark run {run} does not exist in workspace '{workspace}'",
                details={"run": run},
            )
        return {
            "run": run_id(row["id"]),
            "workspace": workspace,
            "principal": row["principal"],
            "started_at": row["started_at"].isoformat(),
            "seconds": row["seconds"],
            "cases": row["cases"],
            "metrics": row["metrics"],
            "by_command": row["by_command"],
            "ranks": row["ranks"],
            "misses": row["misses"],
            "expected_changes": row["expected_changes"],
            "index": row["index_state"],
            "comparison": row["comparison"],
        }

    def try_question(
        self,
        workspace: str,
        question: str,
        command: str,
        filters: Mapping[str, Any] | None,
        explain: Sequence[str],
        *,
        database: str | None,
        schema: str | None,
    ) -> dict[str, Any]:
        """Recall a question as a case would (not logged: the curator's own tries are no
        agent's), with why each card of ``explain`` is or is not returned."""
        if command not in ("search", "rules", "solved"):
            raise InvalidInput(
                "command must be search, rules or solved", details={"command": command}
            )
        query = parse_recall_query(dict(filters or {}))
        query = query.model_copy(update={"top": max(query.top, MISS_K)})
        kind = cast("RecallKind", command)
        recall = self.recall.of(workspace)
        results = recall.recall(
            workspace, question, kind, database=database, schema=schema, query=query
        )
        return {
            "workspace": workspace,
            "question": question,
            "command": command,
            "binding": {"database": database, "schema": schema},
            "results": [r.as_json() for r in results],
            "explain": [
                recall.explain(
                    workspace,
                    question,
                    kind,
                    card,
                    results,
                    database=database,
                    schema=schema,
                    query=query,
                ).as_json()
                for card in dict.fromkeys(explain)
            ],
        }


def _from_row(row: Mapping[str, Any]) -> NewCase:
    return NewCase(
        row["id"],
        row["name"],
        row["question"],
        row["command"],
        row["filters"],
        list(row["expected"]),
        list(row["expected_revisions"]),
        row["origin"],
    )


def _with(case: NewCase, revisions: Mapping[uuid.UUID, int], name: str | None) -> NewCase:
    return NewCase(
        case.id,
        name if name is not None else case.name,
        case.question,
        case.command,
        case.filters,
        list(revisions),
        list(revisions.values()),
        case.origin,
    )
