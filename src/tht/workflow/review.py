"""Review-apply: the reviewer's choice saved once, with its durable receipt, and the
retry of a reviewed solved question's projection.

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

import uuid
from datetime import datetime
from typing import Any

from tht import audit
from tht.accounts import Principal
from tht.errors import (
    ApprovedSqlReadOnly,
    Conflict,
    FamilyImmutable,
    InvalidInput,
    NotFound,
    PermissionDenied,
    ReceiptConflict,
    StaleRevision,
)
from tht.faults import crash_point
from tht.memory.archive.port import Archive, ArchiveTx
from tht.memory.model import CardInput, Source, card_id_to_uuid, parse_card_input, uuid_to_card_id
from tht.memory.workspace_projection import Projection
from tht.workflow.contract import (
    MemorySummaryReviewedEvent,
    Proposal,
    ProposalLink,
    ProposalsFile,
    Review,
    check_session_id,
)
from tht.workflow.recorded import digest, parse_card, receipt_json, recorded_proposals
from tht.workflow.session import Ledger, SessionFiles, SessionStore


class ReviewService:
    def __init__(
        self, archive: Archive, projector: Projection | None, sessions: SessionStore
    ) -> None:
        self.archive = archive
        self.projector = projector
        self.sessions = sessions

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
        files = self.sessions.session(workspace, session)
        files.require()
        receipt, replayed = self._save(
            principal, files, review, nonce=nonce, nonce_expires=nonce_expires
        )
        crash_point("review_apply.after_memory_commit")
        appended = self._append_reviewed(files, receipt)
        crash_point("review_apply.after_ledger_append")
        if receipt["ledger_appended_at"] is None:
            with self.archive.transaction(workspace) as tx:
                tx.reviews.mark_ledger_appended(session)
                marked = tx.reviews.receipt(session)
            assert marked is not None  # a receipt is never removed
            receipt = marked
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
            "receipt": receipt_json(receipt),
            "cards": [{**c, "exists": c["card"] in present} for c in cards],
            "declined": receipt["result"].get("declined", []),
            "ledger": {"event": "memory_summary_reviewed", "appended_now": appended},
            "index": index,
        }

    def _save(
        self,
        principal: Principal,
        files: SessionFiles,
        review: Review,
        *,
        nonce: str | None,
        nonce_expires: datetime | None,
    ) -> tuple[dict[str, Any], bool]:
        """Step 1: the session's receipt, and whether it was there already (the same
        review delivered again); a new review is saved with its receipt first."""
        workspace, session = files.workspace, files.id
        request_digest = digest(
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
            if receipt is not None:
                if receipt["request_digest"] != request_digest:
                    raise ReceiptConflict(
                        f"session {session} was already reviewed with a different choice: the first review stands",
                        details={"session": session, "receipt": receipt_json(receipt)},
                    )
                return receipt, True
            if nonce is not None and not tx.use_nonce(nonce, nonce_expires):
                raise PermissionDenied("this gate request was already used (replay refused)")
            recorded = recorded_proposals(files)
            if review.proposals_digest != recorded.digest:
                raise Conflict(
                    "the proposals changed since the summary was shown: review the new summary",
                    details={"expected": recorded.digest, "reviewed": review.proposals_digest},
                )
            result = _apply(tx, language, session, recorded, review)
            receipt = tx.reviews.insert_receipt(
                session,
                request_digest=request_digest,
                proposals_digest=recorded.digest,
                outcome=result["outcome"],
                reviewer=principal.user,
                result=result,
            )
            return receipt, False

    def _append_reviewed(self, files: SessionFiles, receipt: dict[str, Any]) -> bool:
        event = MemorySummaryReviewedEvent(
            event="memory_summary_reviewed",
            session=files.id,
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

        return files.append_once(event, present)

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


# A selected proposal: the proposal, its card as the reviewer left it, its links.
Chosen = tuple[Proposal, CardInput, list[ProposalLink]]
# A saved card's outgoing links to write once every card of the review is saved.
PendingLinks = tuple[uuid.UUID, list[tuple[uuid.UUID, str]], bool]


def _apply(
    tx: ArchiveTx, language: str, session: str, recorded: ProposalsFile, review: Review
) -> dict[str, Any]:
    """Save the reviewer's choice in ``tx`` (all or nothing); the receipt's result."""
    by_id = {p.id: p for p in recorded.proposals}
    chosen = _chosen(by_id, review, session)
    identity = _identities(chosen, recorded.proposals)
    outcome_cards: list[dict[str, Any]] = []
    pending_links: list[PendingLinks] = []
    for proposal, card, links in chosen:
        card_uuid = identity[proposal.id]
        resolved = _resolve_links(proposal, links, identity, card_uuid)
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
            _check_update(tx, card_uuid, proposal, card)
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
    _save_links(tx, pending_links, new_cards)
    for card_uuid, _, _ in pending_links:
        revision = tx.lock_card(card_uuid)
        assert revision is not None  # saved in this transaction
        tx.enqueue(card_uuid, "upsert", revision)
    written = [c for c in outcome_cards if c["action"] != "reuse"]
    return {
        "outcome": "applied" if written else "declined",
        "cards": outcome_cards,
        "declined": sorted(set(by_id) - {p.id for p, _, _ in chosen}),
    }


def _chosen(by_id: dict[str, Proposal], review: Review, session: str) -> list[Chosen]:
    """The selected proposals with the reviewer's edits, which may change neither the
    family nor a solved question's approved SQL."""
    selected = [] if review.decision == "decline_all" else review.selected
    chosen: list[Chosen] = []
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
            else parse_card(selection.card, f"proposal {proposal.id}")
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
    return chosen


def _identities(chosen: list[Chosen], proposals: list[Proposal]) -> dict[str, uuid.UUID]:
    """Each proposal's card id, decided first so that links between selected new cards
    resolve in the review's transaction; a reused card is an existing card."""
    identity: dict[str, uuid.UUID] = {}
    for proposal, _, _ in chosen:
        if proposal.reuse:
            identity[proposal.id] = card_id_to_uuid(proposal.reuse)
        elif proposal.card_id is not None:  # an update
            identity[proposal.id] = card_id_to_uuid(proposal.card_id)
        else:
            identity[proposal.id] = uuid.uuid4()
    for proposal in proposals:
        if proposal.reuse and proposal.id not in identity:
            identity[proposal.id] = card_id_to_uuid(proposal.reuse)
    return identity


def _resolve_links(
    proposal: Proposal,
    links: list[ProposalLink],
    identity: dict[str, uuid.UUID],
    card_uuid: uuid.UUID,
) -> list[tuple[uuid.UUID, str]]:
    """The proposal's links as (target card, meaning)."""
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
        elif link.target is not None:  # a link names a proposal or a target card
            resolved.append((card_id_to_uuid(link.target), link.meaning))
    targets = [t for t, _ in resolved]
    if card_uuid in targets:
        raise Conflict(f"proposal {proposal.id}: a card cannot link to itself")
    if len(set(targets)) != len(targets):
        raise Conflict(f"proposal {proposal.id}: more than one link to one card")
    return resolved


def _check_update(tx: ArchiveTx, card_uuid: uuid.UUID, proposal: Proposal, card: CardInput) -> None:
    """Lock the updated card: it still exists, at the proposed revision, of its family."""
    locked = tx.lock_card_family(card_uuid)
    if locked is None:
        raise NotFound(
            f"card {proposal.card_id} of proposal {proposal.id} was deleted: it is never"
            " recreated; nothing was saved",
            details={"id": proposal.card_id},
        )
    revision, family = locked
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


def _save_links(
    tx: ArchiveTx, pending_links: list[PendingLinks], new_cards: set[uuid.UUID]
) -> None:
    """Write the saved cards' outgoing links, once every target exists; an update adds
    its links to the card's current outgoing links."""
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
        if is_update:
            kept = {
                card_id_to_uuid(link.target): link.meaning
                for link in tx.cards([card_uuid])[card_uuid].links
            }
            kept.update(dict(resolved))
            resolved = list(kept.items())
        tx.replace_outgoing_links(card_uuid, sorted(resolved))
