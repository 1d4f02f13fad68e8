"""Workflow integration: the session contract, proposals, the reviewer's summary and
the atomic review-apply with its durable receipt (see service.py)."""
