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


class IndexLost(IndexUnavailable):
    """The index lacks points the archive records as projected (a shard deleted or
    replaced behind the projection's back): an empty answer would be a silent lie."""

    code = "index_lost_points"
    default_message = (
        "the search index has lost points the archive records as indexed; run `tht memory index`"
    )


class IndexDrift(IndexUnavailable):
    """``tht memory check`` found the index out of step with the archive; the report is
    in the details."""

    code = "index_drift"
    default_message = "the search index has drifted from the archive"
