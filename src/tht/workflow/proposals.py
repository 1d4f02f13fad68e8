"""Proposals: `tht memory propose` validates a session's proposals against its ledger
and the archive, and records them (exact duplicates marked as reuse) in the session
directory, with the digest the reviewer's choice must name.

Every problem is collected before anything is refused, so one answer lists them all
(``proposal_refused`` with ``details.problems``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from tht.errors import Conflict, InvalidInput, ProposalRefused, ThothError
from tht.memory.archive.port import Archive, ArchiveTx
from tht.memory.idempotency import IdempotencyKey, request_digest
from tht.memory.model import MAX_TITLE, CardInput, card_id_to_uuid, uuid_to_card_id
from tht.validation import describe_validation_error, validation_details
from tht.workflow.contract import (
    ADMISSIBLE_TYPES,
    EXPLAINED_TYPES,
    DecisionEvent,
    Proposal,
    ProposalsFile,
)
from tht.workflow.recorded import parse_card, proposals_digest
from tht.workflow.session import SessionStore

DERIVED_SOLVED = "approved-sql"  # the proposal id of a solved question derived from the ledger

# refuse(proposal id, reason, message): one problem of the proposals
Refuse = Callable[[str, str, str], None]


class ProposalService:
    def __init__(self, archive: Archive, sessions: SessionStore) -> None:
        self.archive = archive
        self.sessions = sessions

    def propose(
        self,
        workspace: str,
        session: str,
        document: Any,
        *,
        idempotency: IdempotencyKey | None = None,
    ) -> dict[str, Any]:
        """Validate the session's proposals against its ledger and the archive, and
        record them (with exact duplicates marked as reuse) in the session directory.

        With an idempotency key, a retry answers the first result. The proposals file is
        not in the archive, so the key is recorded just after it is written: a crash in
        between leaves no key, and the retry writes the same proposals again."""
        if idempotency is None:
            return self._propose(workspace, session, document)
        digest = request_digest("propose", session, document)
        # IdempotencyKey still takes the PostgreSQL transaction, not the port's
        with self.archive.transaction(workspace, lock=True) as tx:
            tx.require_workspace()
            if seen := idempotency.recorded(tx, digest):
                return seen
        result = self._propose(workspace, session, document)
        with self.archive.transaction(workspace, lock=True) as tx:
            if seen := idempotency.recorded(tx, digest):
                return seen  # a duplicate sent at the same time answered first
            idempotency.record(tx, digest, result)
        return result

    def _propose(self, workspace: str, session: str, document: Any) -> dict[str, Any]:
        files = self.sessions.session(workspace, session)
        files.require()
        parsed = _parse_proposals(workspace, session, document)
        decisions = files.ledger().decisions()
        problems: list[dict[str, Any]] = []

        def refuse(proposal: str, reason: str, message: str) -> None:
            problems.append({"proposal": proposal, "reason": reason, "message": message})

        derived = _approved_solved_question(session, decisions, parsed.proposals)
        if derived is not None:
            parsed = parsed.model_copy(update={"proposals": [*parsed.proposals, derived]})
        cards = _check_against_ledger(parsed.proposals, decisions, refuse)
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            if tx.reviews.receipt(session) is not None:
                raise Conflict(
                    f"session {session} was already reviewed: its proposals cannot change",
                    details={"session": session},
                )
            _check_against_archive(tx, workspace, parsed.proposals, cards, refuse)
            recorded = [
                proposal.model_copy(update={"reuse": _reuse(tx, proposal, cards.get(proposal.id))})
                for proposal in parsed.proposals
            ]
        if problems:
            raise ProposalRefused(
                f"{len({p['proposal'] for p in problems})} proposal(s) refused: "
                + "; ".join(f"{p['proposal']}: {p['message']}" for p in problems),
                details={"problems": problems},
            )
        result = ProposalsFile(
            session=session,
            workspace=workspace,
            proposals=recorded,
            digest=proposals_digest(workspace, session, recorded),
            recorded_at=datetime.now(UTC).isoformat(),
        )
        recorded_file = files.write_proposals(result)
        return {
            "session": session,
            "workspace": workspace,
            # relative to the sessions root: an agent on another host (HTTP, MCP) learns
            # nothing of the service's file system
            "recorded": recorded_file,
            "digest": result.digest,
            "proposals": [
                {
                    "id": p.id,
                    "action": "reuse" if p.reuse else p.action,
                    "family": cards[p.id].family,
                    "card_id": p.reuse or p.card_id,
                }
                for p in recorded
            ],
        }


def _parse_proposals(workspace: str, session: str, document: Any) -> ProposalsFile:
    """The proposals as sent, without what `propose` itself sets (digest, time, reuse)."""
    if not isinstance(document, dict):
        raise InvalidInput("the proposals must be a JSON object")
    document = {k: v for k, v in document.items() if k not in ("digest", "recorded_at")}
    if isinstance(document.get("proposals"), list):
        document["proposals"] = [
            {k: v for k, v in p.items() if k != "reuse"} if isinstance(p, dict) else p
            for p in document["proposals"]
        ]
    try:
        parsed = ProposalsFile.model_validate(document)
    except ValidationError as exc:
        raise InvalidInput(
            f"invalid proposals: {describe_validation_error(exc)}",
            details=validation_details(exc),
        ) from exc
    if parsed.session not in (None, session):
        raise InvalidInput(f"the proposals are for session {parsed.session}, not {session}")
    if parsed.workspace not in (None, workspace):
        raise InvalidInput(
            f"the proposals are for workspace '{parsed.workspace}', not '{workspace}'"
        )
    return parsed


def _approved_solved_question(
    session: str, decisions: dict[str, DecisionEvent], proposals: list[Proposal]
) -> Proposal | None:
    """The summary always offers the session's approved SQL as a solved question:
    when Pi proposed none, one is derived from the last effective `sql_approved`
    decision that names its question. It is only a proposal: the reviewer decides."""
    if any(
        isinstance(p.card, dict) and p.card.get("family") == "solved_question" for p in proposals
    ):
        return None
    if any(p.id == DERIVED_SOLVED for p in proposals):
        return None
    approved = [
        d
        for d in decisions.values()
        if d.type == "sql_approved"
        and d.status == "approved"
        and str(d.payload.get("sql") or "").strip()
        and str(d.payload.get("question") or "").strip()
    ]
    if not approved:
        return None
    decision = approved[-1]
    question = str(decision.payload["question"]).strip()
    context = (
        str(decision.payload.get("context") or "").strip() or f"Approved in session {session}."
    )
    return Proposal(
        id=DERIVED_SOLVED,
        action="add",
        sources=[decision.id],
        card={
            "family": "solved_question",
            "title": question[:MAX_TITLE],
            "question": question,
            "sql": str(decision.payload["sql"]).strip(),
            "context": context,
        },
    )


def _check_against_ledger(
    proposals: list[Proposal], decisions: dict[str, DecisionEvent], refuse: Refuse
) -> dict[str, CardInput]:
    """The checks that need only the proposals and the ledger; the cards that parse."""
    ids = [p.id for p in proposals]
    for duplicated in sorted({i for i in ids if ids.count(i) > 1}):
        refuse(duplicated, "duplicate_id", f"proposal id {duplicated} is used twice")
    cards: dict[str, CardInput] = {}
    for proposal in proposals:
        try:
            cards[proposal.id] = parse_card(proposal.card, f"proposal {proposal.id}")
        except ThothError as exc:
            refuse(proposal.id, "invalid_card", exc.message)
    solved = [p.id for p in proposals if p.id in cards and cards[p.id].family == "solved_question"]
    if len(solved) > 1:
        refuse(solved[1], "second_solved_question", "a session has one approved solved question")
    for proposal in proposals:
        card = cards.get(proposal.id)
        if card is not None:
            _check_sources(proposal, card, decisions, refuse)
        _check_links(proposal, ids, refuse)
    return cards


def _check_sources(
    proposal: Proposal, card: CardInput, decisions: dict[str, DecisionEvent], refuse: Refuse
) -> None:
    admissible = ADMISSIBLE_TYPES[card.family]
    approved_sql = []
    for source in proposal.sources:
        decision = decisions.get(source)
        if decision is None:
            refuse(
                proposal.id,
                "unknown_decision",
                f"decision {source} is not in the session ledger",
            )
            continue
        if decision.status != "approved":
            refuse(
                proposal.id,
                "not_approved",
                f"decision {source} is {decision.status}: only effective approved decisions found knowledge",
            )
            continue
        if decision.type not in admissible:
            refuse(
                proposal.id,
                "inadmissible_type",
                f"a decision of type {decision.type} ({source}) cannot found a {card.family}"
                f" (admissible: {', '.join(sorted(admissible))})",
            )
            continue
        if (
            decision.type in EXPLAINED_TYPES
            and not str(decision.payload.get("explanation") or "").strip()
        ):
            refuse(
                proposal.id,
                "unexplained",
                f"decision {source} has no approved explanation: an unexplained failure is not knowledge",
            )
        if decision.type == "sql_approved":
            approved_sql.append(str(decision.payload.get("sql") or "").strip())
    if card.family == "solved_question":
        if not approved_sql:
            refuse(
                proposal.id,
                "no_approved_sql",
                "a solved question names its sql_approved decision",
            )
        elif (card.sql or "").strip() not in approved_sql:
            refuse(
                proposal.id,
                "sql_not_approved",
                "the solved question's SQL differs from the approved SQL of its decision",
            )


def _check_links(proposal: Proposal, ids: list[str], refuse: Refuse) -> None:
    seen = set()
    for link in proposal.links:
        key = link.target or f"proposal:{link.proposal}"
        if key in seen:
            refuse(
                proposal.id,
                "duplicate_link",
                f"more than one link to {link.target or link.proposal}",
            )
        seen.add(key)
        if link.proposal is not None:
            if link.proposal == proposal.id:
                refuse(proposal.id, "self_link", "a proposal cannot link to itself")
            elif link.proposal not in ids:
                refuse(
                    proposal.id,
                    "missing_link_target",
                    f"proposal {link.proposal} is not in this summary",
                )
        if link.target is not None and proposal.card_id == link.target:
            refuse(proposal.id, "self_link", "a card cannot link to itself")


def _check_against_archive(
    tx: ArchiveTx,
    workspace: str,
    proposals: list[Proposal],
    cards: dict[str, CardInput],
    refuse: Refuse,
) -> None:
    """Link targets exist; an update names the card's current revision and family."""
    targets = {card_id_to_uuid(link.target) for p in proposals for link in p.links if link.target}
    updated = {card_id_to_uuid(p.card_id) for p in proposals if p.card_id is not None}
    existing = tx.cards(sorted(targets | updated))
    for proposal in proposals:
        card = cards.get(proposal.id)
        for link in proposal.links:
            if link.target and card_id_to_uuid(link.target) not in existing:
                refuse(
                    proposal.id,
                    "missing_link_target",
                    f"link target {link.target} does not exist in workspace '{workspace}'",
                )
        if proposal.card_id is None:  # an addition (an update always names its card)
            continue
        current = existing.get(card_id_to_uuid(proposal.card_id))
        if current is None:
            refuse(proposal.id, "missing_card", f"card {proposal.card_id} does not exist")
        elif current.revision != proposal.revision:
            refuse(
                proposal.id,
                "stale_revision",
                f"card {proposal.card_id} is at revision {current.revision}, not {proposal.revision}",
            )
        elif card is not None and current.family != card.family:
            refuse(
                proposal.id,
                "family_changed",
                f"an update keeps the family of {proposal.card_id} ({current.family})",
            )


def _reuse(tx: ArchiveTx, proposal: Proposal, card: CardInput | None) -> str | None:
    """The existing card an addition repeats exactly (same folded texts and
    dependencies), which the review then reuses instead of adding a copy."""
    if card is None or proposal.action != "add":
        return None
    ids = tx.reviews.exact_duplicates(
        card.family,
        content=_fold(card.content),
        scope=_fold(card.scope),
        question=_fold(card.question),
        sql=_fold(card.sql),
        context=_fold(card.context),
    )
    if not ids:
        return None
    wanted = sorted(d.key() for d in card.dependencies)
    for uid, existing in tx.cards(ids).items():
        if sorted(d.key() for d in existing.dependencies) == wanted:
            return uuid_to_card_id(uid)
    return None


def _fold(text: str | None) -> str:
    return re.sub(r"\s+", " ", (text or "").strip()).lower()
