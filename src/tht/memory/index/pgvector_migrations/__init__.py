"""The pgvector projection engine's migration pack (schema ``thoth_memory_pgvector``).

Separate from the archive's pack because pgvector is not a trusted extension: a
superuser must create it, and an installation that uses a Qdrant engine never needs
it. Applied by ``tht memory migrate --engine pgvector`` after the archive's pack.
"""

from tht.db.migrations import MigrationPack

SCHEMA = "thoth_memory_pgvector"
PACK = MigrationPack(
    __name__,
    SCHEMA,
    "`tht memory migrate --engine pgvector`",
    report_key="pgvector",
    extensions=("vector",),
)
