"""The Catalog's migration pack (schema ``thoth_catalog``).

The Catalog is a separate module with its own schema and ledger: no foreign key
reaches into ``thoth_memory`` (nor the other way), so either can be rebuilt or
replaced without the other. Applied by ``tht memory migrate`` after the archive's
pack (it reuses the archive's restricted runtime role).
"""

from tht.db.migrations import MigrationPack

SCHEMA = "thoth_catalog"
PACK = MigrationPack(
    __name__,
    SCHEMA,
    "`tht memory migrate` (or `python -m tht.memory.migrate`)",
    report_key="catalog",
)
