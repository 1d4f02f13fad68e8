"""Errors of the search index, in the package's one hierarchy.

Every index failure is an ``IndexUnavailable`` so a caller that leaves a retryable
pending operation on failure needs one ``except``; the subclasses say why.
"""

from __future__ import annotations

from tht.errors import ThothError


class IndexUnavailable(ThothError):
    code = "index_unavailable"
    http_status = 503
    exit_code = 8
    default_message = "the search index is unavailable"


class IndexBusy(IndexUnavailable):
    """The embedded index is single-process and another process holds it."""

    code = "index_busy"
    default_message = "the embedded search index is held by another process"


class IndexIncompatible(IndexUnavailable):
    """The existing collection's vector configuration cannot serve this projection."""

    code = "index_incompatible"
    default_message = "the search index collection has an incompatible configuration"
