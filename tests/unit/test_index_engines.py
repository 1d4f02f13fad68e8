"""The table of index engines (``tht.memory.index.engines``) is the one list of them:
the installation's setting, `tht memory migrate --engine` and its help read it."""

from __future__ import annotations

from typing import get_args

import pytest

from tht.commands.operator import MemoryMigrateIn, memory_migrate
from tht.errors import InvalidInput
from tht.installation import IndexConfig
from tht.memory.index.engines import ENGINES, engine_names


def test_the_installation_accepts_the_engines_of_the_table() -> None:
    assert list(get_args(IndexConfig.model_fields["engine"].annotation)) == engine_names()
    assert IndexConfig().engine in ENGINES


def test_an_engine_is_refused_a_key_it_does_not_read() -> None:
    for name, engine in ENGINES.items():
        for key, value in (("url", "http://q:6333"), ("path", "/srv/index")):
            given = {
                "engine": name,
                key: value,
                **{k: "http://q" for k in engine.required if k != key},
            }
            if key in engine.keys:
                assert getattr(IndexConfig(**given), key) is not None
            else:
                with pytest.raises(ValueError, match=f"engine {name} takes no {key}"):
                    IndexConfig(**given)


def test_migrate_names_the_engines_of_the_table_when_refusing_one() -> None:
    with pytest.raises(InvalidInput) as refused:
        memory_migrate(None, MemoryMigrateIn(engine="faiss"))  # type: ignore[arg-type]
    assert refused.value.message == (
        "unknown index engine 'faiss' (expected edge, qdrant or pgvector)"
    )


def test_only_pgvector_keeps_tables_in_postgresql() -> None:
    assert engine_names(with_tables=True) == ["pgvector"]
    pack = ENGINES["pgvector"].migration_pack()
    assert pack is not None and pack.report_key == "pgvector"
    assert ENGINES["edge"].migration_pack() is None
