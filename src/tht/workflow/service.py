"""WorkflowService: proposals, the reviewer's editable summary, the atomic review-apply
with its durable receipt, and what the gates consume.

Review-apply in steps, each recoverable:

1. one archive transaction under the workspace lock: the receipt is looked up; a new
   review spends its gate nonce, saves the selected cards, their dependencies, links
   and pending index operations, and writes the receipt (the result) - all or nothing;
2. (crash point ``review_apply.after_memory_commit``)
3. ``memory_summary_reviewed`` is appended to the session ledger unless it is there;
4. the receipt records that the ledger has the event;
5. the index is brought up to date; what fails stays pending and retryable.

A redelivery finds the receipt: the same content reads the stored result back and
completes steps 3-4 if a crash interrupted them; other content is refused. Nothing
after step 1 writes Memory, so a card deleted meanwhile is never recreated.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tht import audit
from tht.accounts import Principal
from tht.errors import (
    ApprovedSqlReadOnly,
    Conflict,
    FamilyImmutable,
    InvalidInput,
    NotFound,
    PermissionDenied,
    ProposalRefused,
    ReceiptConflict,
    StaleRevision,
    ThothError,
)
from tht.faults import crash_point
from tht.memory.archive.port import Archive, ArchiveTx
from tht.memory.error_signature import normalize_error
from tht.memory.idempotency import IdempotencyKey, request_digest
from tht.memory.model import (
    MAX_TITLE,
    Card,
    CardInput,
    Source,
    card_id_to_uuid,
    parse_card_input,
    uuid_to_card_id,
)
from tht.memory.recall_filters import RecallFilters, card_matches
from tht.validation import describe_validation_error, validation_details
from tht.workflow.contract import (
    ADMISSIBLE_TYPES,
    EXPLAINED_TYPES,
    GATE,
    MemorySummaryReviewedEvent,
    Proposal,
    ProposalLink,
    ProposalsFile,
    Review,
    check_session_id,
)
from tht.workflow.session import Ledger, SessionStore

DERIVED_SOLVED = "approved-sql"  # the proposal id of a solved question derived from the ledger
CARD_FIELDS = (
    "title",
    "content",
    "scope",
    "rationale",
    "question",
    "sql",
    "context",
    "error_signature",
    "concepts",
)


def _digest(document: Any) -> str:
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _fold(text: str | None) -> str:
    return re.sub(r"\s+", " ", (text or "").strip()).lower()


def _parse_card(document: Any, where: str) -> CardInput:
    if not isinstance(document, dict):
        raise InvalidInput(f"{where}: the card must be a JSON object")
    for key in ("links", "revision"):
        if key in document:
            raise InvalidInput(
                f"{where}: '{key}' does not go in the card (links belong to the proposal,"
                " the revision to an update)"
            )
    try:
        return parse_card_input(document)
    except ThothError as exc:
        raise type(exc)(f"{where}: {exc.message}", details=exc.details) from exc


class WorkflowService:
    def __init__(
        self,
        archive: Archive,
        projector: Any = None,
        recall: Any = None,
        sessions_root: Path | None = None,
    ) -> None:
        self.archive = archive
        self.projector = projector
        self.recall = recall
        self.sessions = SessionStore(sessions_root)

    # --- propose --------------------------------------------------------------------

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
        check_session_id(session)
        self.sessions.directory(session)
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
        ledger = self.sessions.ledger(session)
        decisions = ledger.decisions()
        problems: list[dict[str, Any]] = []

        def refuse(proposal: str, reason: str, message: str) -> None:
            problems.append({"proposal": proposal, "reason": reason, "message": message})

        derived = self._approved_solved_question(session, decisions, parsed.proposals)
        if derived is not None:
            parsed = parsed.model_copy(update={"proposals": [*parsed.proposals, derived]})
        ids = [p.id for p in parsed.proposals]
        for duplicated in sorted({i for i in ids if ids.count(i) > 1}):
            refuse(duplicated, "duplicate_id", f"proposal id {duplicated} is used twice")
        cards: dict[str, CardInput] = {}
        for proposal in parsed.proposals:
            try:
                cards[proposal.id] = _parse_card(proposal.card, f"proposal {proposal.id}")
            except ThothError as exc:
                refuse(proposal.id, "invalid_card", exc.message)
        solved = [
            p.id
            for p in parsed.proposals
            if cards.get(p.id) and cards[p.id].family == "solved_question"
        ]
        if len(solved) > 1:
            refuse(
                solved[1], "second_solved_question", "a session has one approved solved question"
            )
        for proposal in parsed.proposals:
            card = cards.get(proposal.id)
            if card is not None:
                self._check_sources(proposal, card, decisions, refuse)
            self._check_links(proposal, ids, refuse)

        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            if tx.reviews.receipt(session) is not None:
                raise Conflict(
                    f"session {session} was already reviewed: its proposals cannot change",
                    details={"session": session},
                )
            targets = {
                card_id_to_uuid(link.target)
                for p in parsed.proposals
                for link in p.links
                if link.target
            }
            updated = [card_id_to_uuid(p.card_id) for p in parsed.proposals if p.action == "update"]
            existing = tx.cards(sorted(targets | set(updated)))
            for proposal in parsed.proposals:
                card = cards.get(proposal.id)
                for link in proposal.links:
                    if link.target and card_id_to_uuid(link.target) not in existing:
                        refuse(
                            proposal.id,
                            "missing_link_target",
                            f"link target {link.target} does not exist in workspace '{workspace}'",
                        )
                if proposal.action == "update":
                    current = existing.get(card_id_to_uuid(proposal.card_id))
                    if current is None:
                        refuse(
                            proposal.id, "missing_card", f"card {proposal.card_id} does not exist"
                        )
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
            recorded = []
            for proposal in parsed.proposals:
                card = cards.get(proposal.id)
                reuse = None
                if card is not None and proposal.action == "add":
                    reuse = self._exact_duplicate(tx, card)
                recorded.append(proposal.model_copy(update={"reuse": reuse}))
        if problems:
            raise ProposalRefused(
                f"{len({p['proposal'] for p in problems})} proposal(s) refused: "
                + "; ".join(f"{p['proposal']}: {p['message']}" for p in problems),
                details={"problems": problems},
            )
        body = {
            "workspace": workspace,
            "session": session,
            "proposals": [p.model_dump(mode="json", exclude_none=True) for p in recorded],
        }
        result = ProposalsFile(
            session=session,
            workspace=workspace,
            proposals=recorded,
            digest=_digest(body),
            recorded_at=datetime.now(UTC).isoformat(),
        )
        path = self.sessions.write_proposals(session, result)
        return {
            "session": session,
            "workspace": workspace,
            "recorded": str(path),
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

    @staticmethod
    def _approved_solved_question(
        session: str, decisions: dict, proposals: list[Proposal]
    ) -> Proposal | None:
        """The summary always offers the session's approved SQL as a solved question:
        when Pi proposed none, one is derived from the last effective `sql_approved`
        decision that names its question. It is only a proposal: the reviewer decides."""
        if any(
            isinstance(p.card, dict) and p.card.get("family") == "solved_question"
            for p in proposals
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

    @staticmethod
    def _check_sources(proposal: Proposal, card: CardInput, decisions: dict, refuse: Any) -> None:
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

    @staticmethod
    def _check_links(proposal: Proposal, ids: list[str], refuse: Any) -> None:
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

    @staticmethod
    def _exact_duplicate(tx: ArchiveTx, card: CardInput) -> str | None:
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

    # --- summary ----------------------------------------------------------------------

    def _recorded(self, workspace: str, session: str) -> ProposalsFile:
        recorded = self.sessions.proposals(session)
        if recorded is None:
            return ProposalsFile(
                session=session,
                workspace=workspace,
                proposals=[],
                digest=_digest({"workspace": workspace, "session": session, "proposals": []}),
            )
        if recorded.digest is None:
            raise InvalidInput(
                f"the proposals of session {session} were not recorded: run `tht memory propose`"
            )
        if recorded.workspace != workspace or recorded.session != session:
            raise InvalidInput(
                f"the proposals of session {session} belong to workspace '{recorded.workspace}'"
            )
        body = {
            "workspace": workspace,
            "session": session,
            "proposals": [p.model_dump(mode="json", exclude_none=True) for p in recorded.proposals],
        }
        if _digest(body) != recorded.digest:
            raise Conflict(
                f"the proposals of session {session} changed after they were recorded: propose again"
            )
        return recorded

    def list_sessions(self, principal: Principal, workspace: str) -> list[dict[str, Any]]:
        """Sessions of this workspace with recorded proposals, newest first, and whether
        they were reviewed."""
        principal.require_manage(workspace)
        found = []
        for session in self.sessions.sessions():
            try:
                recorded = self.sessions.proposals(session)
            except ThothError:
                continue
            if recorded is not None and recorded.workspace == workspace and recorded.digest:
                found.append(
                    {
                        "session": session,
                        "proposals": len(recorded.proposals),
                        "recorded_at": recorded.recorded_at,
                    }
                )
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            for item in found:
                receipt = tx.reviews.receipt(item["session"])
                item["reviewed"] = receipt["outcome"] if receipt else None
        return sorted(found, key=lambda i: (i["recorded_at"] or "", i["session"]), reverse=True)

    def summary(
        self, workspace: str, session: str, *, principal: Principal | None = None
    ) -> dict[str, Any]:
        """One editable summary: additions, updates with their change, the approved
        solved question (its SQL read-only), links, reused cards."""
        if principal is not None:
            principal.require_manage(workspace)
        check_session_id(session)
        self.sessions.directory(session)
        recorded = self._recorded(workspace, session)
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            receipt = tx.reviews.receipt(session)
            wanted = {
                card_id_to_uuid(c)
                for p in recorded.proposals
                for c in [p.card_id, p.reuse, *[link.target for link in p.links]]
                if c
            }
            existing = tx.cards(sorted(wanted))
        current = {uuid_to_card_id(k): v for k, v in existing.items()}
        additions, updates, reused, links = [], [], [], []
        solved = None
        for proposal in recorded.proposals:
            card = parse_card_input(proposal.card)
            edit = card.model_dump(
                mode="json", by_alias=True, exclude_none=True, exclude={"revision", "links"}
            )
            for link in proposal.links:
                links.append(
                    {
                        "from": proposal.id,
                        "target": link.target,
                        "proposal": link.proposal,
                        "meaning": link.meaning,
                        "target_title": current[link.target].title
                        if link.target in current
                        else None,
                    }
                )
            entry = {
                "proposal": proposal.id,
                "family": card.family,
                "sources": proposal.sources,
                "card": edit,
                "links": [link.model_dump(exclude_none=True) for link in proposal.links],
            }
            if proposal.reuse:
                found = current.get(proposal.reuse)
                reused.append(
                    {
                        "proposal": proposal.id,
                        "card_id": proposal.reuse,
                        "title": found.title if found else None,
                        "exists": found is not None,
                    }
                )
            elif proposal.action == "update":
                found = current.get(proposal.card_id)
                updates.append(
                    {
                        **entry,
                        "card_id": proposal.card_id,
                        "revision": proposal.revision,
                        "change": proposal.change,
                        "current": found.as_json() if found else None,
                        "current_revision": found.revision if found else None,
                        "stale": found is None or found.revision != proposal.revision,
                        "changes": _changes(found, card) if found else [],
                    }
                )
            elif card.family == "solved_question":
                solved = {
                    **entry,
                    "question": card.question,
                    "sql": card.sql,
                    "context": card.context,
                    "sql_read_only": True,
                }
            else:
                additions.append(entry)
        return {
            "session": session,
            "workspace": workspace,
            "gate": GATE,
            "proposals_digest": recorded.digest,
            "additions": additions,
            "updates": updates,
            "solved_question": solved,
            "links": links,
            "reused": reused,
            "reviewed": _receipt_json(receipt) if receipt else None,
        }

    # --- review-apply --------------------------------------------------------------------

    def review_apply(
        self,
        principal: Principal,
        workspace: str,
        session: str,
        review: Review,
        *,
        nonce: str | None = None,
        nonce_expires: datetime | None = None,
    ) -> dict[str, Any]:
        """Apply the reviewer's choice once; a redelivery returns the same result."""
        principal.require_manage(workspace)
        check_session_id(session)
        self.sessions.directory(session)
        request_digest = _digest(
            {
                "workspace": workspace,
                "session": session,
                "review": review.model_dump(mode="json", exclude_none=True),
            }
        )
        with (
            audit.acting(principal.user, via="review"),
            self.archive.transaction(workspace, lock=True, accounts=nonce is not None) as tx,
        ):
            language = tx.require_workspace().language
            receipt = tx.reviews.receipt(session)
            replayed = receipt is not None
            if receipt is not None:
                if receipt["request_digest"] != request_digest:
                    raise ReceiptConflict(
                        f"session {session} was already reviewed with a different choice: the first review stands",
                        details={"session": session, "receipt": _receipt_json(receipt)},
                    )
            else:
                if nonce is not None and not tx.use_nonce(nonce, nonce_expires):
                    raise PermissionDenied("this gate request was already used (replay refused)")
                recorded = self._recorded(workspace, session)
                if review.proposals_digest != recorded.digest:
                    raise Conflict(
                        "the proposals changed since the summary was shown: review the new summary",
                        details={"expected": recorded.digest, "reviewed": review.proposals_digest},
                    )
                result = self._apply(tx, language, session, recorded, review)
                receipt = tx.reviews.insert_receipt(
                    session,
                    request_digest=request_digest,
                    proposals_digest=recorded.digest,
                    outcome=result["outcome"],
                    reviewer=principal.user,
                    result=result,
                )
        crash_point("review_apply.after_memory_commit")
        appended = self._append_reviewed(workspace, session, receipt)
        crash_point("review_apply.after_ledger_append")
        if receipt["ledger_appended_at"] is None:
            with self.archive.transaction(workspace) as tx:
                tx.reviews.mark_ledger_appended(session)
                receipt = tx.reviews.receipt(session)
        cards = receipt["result"]["cards"]
        written = [card_id_to_uuid(c["card"]) for c in cards if c["action"] in ("add", "update")]
        index = self._index(workspace, written)
        with self.archive.transaction(workspace) as tx:
            present = {
                uuid_to_card_id(i)
                for i in tx.existing_cards([card_id_to_uuid(c["card"]) for c in cards])
            }
        return {
            "status": receipt["outcome"],
            "replayed": replayed,
            "session": session,
            "receipt": _receipt_json(receipt),
            "cards": [{**c, "exists": c["card"] in present} for c in cards],
            "declined": receipt["result"].get("declined", []),
            "ledger": {"event": "memory_summary_reviewed", "appended_now": appended},
            "index": index,
        }

    def _apply(
        self,
        tx: ArchiveTx,
        language: str,
        session: str,
        recorded: ProposalsFile,
        review: Review,
    ) -> dict[str, Any]:
        by_id = {p.id: p for p in recorded.proposals}
        selected = [] if review.decision == "decline_all" else review.selected
        chosen: list[tuple[Proposal, CardInput, list[ProposalLink]]] = []
        for selection in selected:
            proposal = by_id.get(selection.proposal)
            if proposal is None:
                raise InvalidInput(
                    f"proposal {selection.proposal} is not in the summary of session {session}"
                )
            proposed = parse_card_input(proposal.card)
            card = (
                proposed
                if selection.card is None
                else _parse_card(selection.card, f"proposal {proposal.id}")
            )
            if card.family != proposed.family:
                raise InvalidInput(
                    f"proposal {proposal.id}: the review cannot change the family ({proposed.family})"
                )
            if (
                card.family == "solved_question"
                and (card.sql or "").strip() != (proposed.sql or "").strip()
            ):
                raise ApprovedSqlReadOnly(details={"proposal": proposal.id})
            chosen.append(
                (proposal, card, proposal.links if selection.links is None else selection.links)
            )
        # identities first, so links between selected new cards resolve in this transaction
        identity: dict[str, uuid.UUID] = {}
        for proposal, _, _ in chosen:
            if proposal.reuse:
                identity[proposal.id] = card_id_to_uuid(proposal.reuse)
            elif proposal.action == "update":
                identity[proposal.id] = card_id_to_uuid(proposal.card_id)
            else:
                identity[proposal.id] = uuid.uuid4()
        for proposal in recorded.proposals:  # a reused card is an existing card
            if proposal.reuse and proposal.id not in identity:
                identity[proposal.id] = card_id_to_uuid(proposal.reuse)
        outcome_cards = []
        pending_links: list[tuple[uuid.UUID, list[tuple[uuid.UUID, str]], bool]] = []
        for proposal, card, links in chosen:
            card_uuid = identity[proposal.id]
            resolved = []
            for link in links:
                if link.proposal is not None:
                    if link.proposal not in identity:
                        raise InvalidInput(
                            f"proposal {proposal.id} links to proposal {link.proposal}, which is not selected:"
                            " nothing was saved",
                            details={"proposal": proposal.id, "link": link.proposal},
                        )
                    resolved.append((identity[link.proposal], link.meaning))
                else:
                    resolved.append((card_id_to_uuid(link.target), link.meaning))
            targets = [t for t, _ in resolved]
            if card_uuid in targets:
                raise Conflict(f"proposal {proposal.id}: a card cannot link to itself")
            if len(set(targets)) != len(targets):
                raise Conflict(f"proposal {proposal.id}: more than one link to one card")
            if proposal.reuse:
                outcome_cards.append(
                    {
                        "proposal": proposal.id,
                        "card": proposal.reuse,
                        "action": "reuse",
                        "family": card.family,
                    }
                )
                continue
            if proposal.action == "update":
                locked = tx.lock_card_family(card_uuid)
                revision, family = locked if locked else (None, None)
                if revision is None:
                    raise NotFound(
                        f"card {proposal.card_id} of proposal {proposal.id} was deleted: it is never"
                        " recreated; nothing was saved",
                        details={"id": proposal.card_id},
                    )
                if revision != proposal.revision:
                    raise StaleRevision(
                        f"card {proposal.card_id} changed since it was proposed (revision {revision}, not"
                        f" {proposal.revision}): nothing was saved",
                        details={
                            "id": proposal.card_id,
                            "expected": proposal.revision,
                            "current": revision,
                        },
                    )
                if family != card.family:
                    raise FamilyImmutable(
                        f"card {proposal.card_id} of proposal {proposal.id} is a {family}, not a"
                        f" {card.family}: a card's family cannot change; nothing was saved",
                        details={
                            "id": proposal.card_id,
                            "field": "family",
                            "current": family,
                            "requested": card.family,
                        },
                    )
                tx.update_card(card_uuid, card)
            else:
                tx.insert_card(
                    card_uuid,
                    card,
                    language=language,
                    origin="workflow",
                    source=Source(session=session, decisions=proposal.sources),
                )
            tx.replace_dependencies(card_uuid, card.dependencies)
            pending_links.append((card_uuid, resolved, proposal.action == "update"))
            outcome_cards.append(
                {
                    "proposal": proposal.id,
                    "card": uuid_to_card_id(card_uuid),
                    "action": proposal.action,
                    "family": card.family,
                }
            )
        new_cards = {identity[p.id] for p, _, _ in chosen if p.action == "add" and not p.reuse}
        for card_uuid, resolved, is_update in pending_links:
            outside = {t for t, _ in resolved} - new_cards
            missing = outside - tx.existing_cards(sorted(outside))
            if missing:
                names = sorted(uuid_to_card_id(m) for m in missing)
                raise NotFound(
                    f"link target {', '.join(names)} does not exist in workspace '{tx.workspace_id}':"
                    " nothing was saved",
                    details={"missing_targets": names},
                )
            if is_update:  # an update adds its links to the card's current outgoing links
                kept = {
                    card_id_to_uuid(link.target): link.meaning
                    for link in tx.cards([card_uuid])[card_uuid].links
                }
                kept.update(dict(resolved))
                resolved = list(kept.items())
            tx.replace_outgoing_links(card_uuid, sorted(resolved))
        for card_uuid, _, _ in pending_links:
            revision = tx.lock_card(card_uuid)
            tx.enqueue(card_uuid, "upsert", revision)
        written = [c for c in outcome_cards if c["action"] != "reuse"]
        return {
            "outcome": "applied" if written else "declined",
            "cards": outcome_cards,
            "declined": sorted(set(by_id) - {p.id for p, _, _ in chosen}),
        }

    def _append_reviewed(self, workspace: str, session: str, receipt: dict) -> bool:
        event = MemorySummaryReviewedEvent(
            event="memory_summary_reviewed",
            session=session,
            outcome=receipt["outcome"],
            reviewer=receipt["reviewer"],
            request_digest=receipt["request_digest"],
            proposals_digest=receipt["proposals_digest"],
            cards=[
                {"proposal": c["proposal"], "card": c["card"], "action": c["action"]}
                for c in receipt["result"]["cards"]
            ],
            at=receipt["created_at"].isoformat(),
        ).model_dump(mode="json")

        def present(ledger: Ledger) -> bool:
            return any(
                isinstance(e, MemorySummaryReviewedEvent)
                and e.request_digest == receipt["request_digest"]
                for e in ledger.events
            )

        return self.sessions.append_once(session, event, present)

    def _index(self, workspace: str, card_uuids: list[uuid.UUID]) -> dict[str, Any]:
        error = None
        with self.archive.transaction(workspace) as tx:
            outstanding = list(tx.operations_for(card_uuids))
        # current archive state only: a deleted card's point is removed, never restored
        if outstanding and self.projector is not None:
            error = self.projector.sync(workspace, outstanding).error
        with self.archive.transaction(workspace) as tx:
            operations = tx.operations_for(card_uuids)
        pending = sorted(uuid_to_card_id(i) for i in operations)
        if self.projector is None and pending:
            error = "no search index is configured"
        return {
            "status": "pending" if pending else "current",
            "pending": pending,
            "error": error if pending else None,
        }

    # --- consumption ------------------------------------------------------------------

    def decided_cards(self, session: str) -> frozenset[uuid.UUID]:
        """Memory already decided in the session (excluded from its recall)."""
        check_session_id(session)
        self.sessions.directory(session)
        return frozenset(card_id_to_uuid(c) for c in self.sessions.ledger(session).decided_cards())

    def solved_index(self, workspace: str, session: str) -> dict[str, Any]:
        """Retry the projection of the solved question a session's review saved. It
        only reads the receipt: it never creates or restores content."""
        check_session_id(session)
        with self.archive.transaction(workspace) as tx:
            tx.require_workspace()
            receipt = tx.reviews.receipt(session)
        if receipt is None:
            raise NotFound(
                f"session {session} has no review receipt: there is no solved question to index",
                details={"session": session},
            )
        solved = [c for c in receipt["result"]["cards"] if c.get("family") == "solved_question"]
        if not solved:
            raise NotFound(
                f"the review of session {session} saved no solved question",
                details={"session": session},
            )
        if self.projector is None:
            raise InvalidInput("no search index is configured")
        results = []
        for entry in solved:
            try:
                outcome = self.projector.retry(workspace, entry["card"])
                results.append({"card": entry["card"], "index": outcome.as_json()})
            except NotFound:
                results.append({"card": entry["card"], "index": None, "status": "deleted"})
        return {"session": session, "results": results}

    def rules_for_error(
        self,
        workspace: str,
        error_text: str,
        question: str | None,
        *,
        database: str | None,
        schema: str | None,
        query: Any,
        exclude: frozenset[uuid.UUID],
    ) -> dict[str, Any]:
        """Explained errors whose signature equals the error's (PostgreSQL, exact),
        then hybrid recall of rules and explained errors."""
        signature = normalize_error(error_text)
        if signature is None:
            raise InvalidInput("--error holds no error text")
        filters = RecallFilters(
            workspace=workspace,
            families=query.families_for("rules"),
            scope=query.scope,
            concepts=tuple(query.concepts),
            database=database,
            schema_name=schema,
            table=query.table,
            column=query.column,
        )
        with self.archive.transaction(workspace, lock="shared") as tx:
            tx.require_workspace()
            ids = tx.reviews.error_signature_matches(signature)
            facts = tx.recall_facts(ids)
            matching = [
                i
                for i in ids
                if i in facts and i not in exclude and card_matches(facts[i][1], filters)
            ]
            exact_cards = tx.cards(matching[: query.top])
        exact = []
        for rank, card_uuid in enumerate(matching[: query.top], start=1):
            data = exact_cards[card_uuid].as_json()
            data.pop("incoming_links", None)
            data["score"] = None
            data["retrieval"] = {
                "path": [data["id"]],
                "via": "error_signature",
                "seed_rank": rank,
                "dense_rank": None,
                "bm25_rank": None,
                "matched_kind": "error_signature",
                "hops": 0,
                "meanings": [],
            }
            exact.append(data)
        results = list(exact)
        remaining = query.top - len(exact)
        recall_error = None
        if remaining > 0:
            try:
                found = self.recall.recall(
                    workspace,
                    question or error_text,
                    "rules",
                    database=database,
                    schema=schema,
                    query=query.model_copy(update={"top": remaining}),
                    exclude=exclude | frozenset(matching),
                )
                results += [r.as_json() for r in found]
            except ThothError as exc:
                if not exact:
                    raise
                recall_error = exc.to_dict()["error"]
        answer: dict[str, Any] = {
            "error_signature": signature,
            "exact": len(exact),
            "results": results,
        }
        if recall_error is not None:
            answer["recall_error"] = recall_error
        return answer


def _receipt_json(receipt: dict) -> dict[str, Any]:
    return {
        "session": receipt["session_id"],
        "outcome": receipt["outcome"],
        "reviewer": receipt["reviewer"],
        "request_digest": receipt["request_digest"],
        "proposals_digest": receipt["proposals_digest"],
        "created_at": receipt["created_at"].isoformat(),
        "ledger_appended_at": receipt["ledger_appended_at"].isoformat()
        if receipt["ledger_appended_at"]
        else None,
        "cards": receipt["result"]["cards"],
    }


def _changes(current: Card, proposed: CardInput) -> list[dict[str, Any]]:
    changes = []
    for field in CARD_FIELDS:
        before, after = getattr(current, field), getattr(proposed, field)
        if field == "error_signature" and "error_signature" not in proposed.model_fields_set:
            continue
        if before != after:
            changes.append({"field": field, "before": before, "after": after})
    before_deps = sorted(d.as_json().items() for d in current.dependencies)
    after_deps = sorted(d.as_json().items() for d in proposed.dependencies)
    if before_deps != after_deps:
        changes.append(
            {
                "field": "dependencies",
                "before": [d.as_json() for d in current.dependencies],
                "after": [d.as_json() for d in proposed.dependencies],
            }
        )
    return changes
