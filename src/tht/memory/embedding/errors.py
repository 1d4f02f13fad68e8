"""Errors of the embedding providers, in the package's one hierarchy."""

from __future__ import annotations

from tht.errors import ThothError


class EmbedderUnavailable(ThothError):
    """The embedding model cannot be loaded or the embedding service did not answer.

    Like an unavailable index, this never blocks browsing and editing: writes keep a
    retryable pending operation.
    """

    code = "embedder_unavailable"
    http_status = 503
    exit_code = 8
    default_message = "the embedding provider is unavailable"
