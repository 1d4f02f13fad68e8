"""One data-access style: application services call typed methods of an
archive or Catalog transaction; the raw named-SQL accessors belong to the adapters
(``tht.memory.archive`` with its record classes, ``tht.catalog.store``)."""

from __future__ import annotations

import ast
from pathlib import Path

from tht.catalog.store import CatalogTransaction
from tht.memory.archive.postgres import ArchiveTransaction

SOURCE = Path(__file__).resolve().parents[2] / "src" / "tht"
# the adapters that own SQL run through a transaction
ADAPTERS = ("memory/archive/", "catalog/store.py")
RAW = {"row", "rows", "one", "using", "_row", "_rows", "_one", "_execute", "_using"}


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def raw_calls(root: Path) -> list[str]:
    """``file:line call`` of every raw accessor used outside the adapters: any call
    named like one of them, ``execute`` on a transaction (a receiver named ``tx``; a
    connection's ``execute`` in an adapter of its own, such as pgvector's, is not an
    archive transaction), and a transaction's driver connection (``tx.conn``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(ADAPTERS):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "conn"
                and _receiver(node.value).endswith("tx")
            ):
                found.append(f"{relative}:{node.lineno} {_receiver(node.value)}.conn")
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            name, receiver = node.func.attr, _receiver(node.func.value)
            if name in RAW or (name == "execute" and receiver.endswith("tx")):
                found.append(f"{relative}:{node.lineno} {receiver}.{name}(...)")
    return sorted(found)


def test_no_service_runs_named_sql_through_a_transaction() -> None:
    assert raw_calls(SOURCE) == []


def test_the_scan_finds_a_raw_call(tmp_path: Path) -> None:
    # the check itself must see what it forbids (else an empty answer proves nothing)
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "archive").mkdir()
    (tmp_path / "service.py").write_text(
        "def f(tx, conn):\n"
        "    tx.row('user_by_name', name='a')\n"
        "    tx.execute('sessions_expire')\n"
        "    tx._using({}).rows('x')\n"
        "    conn.execute('SELECT 1')\n"  # a connection, not a transaction
        "    tx.conn.execute('SELECT 1')\n"
    )
    (tmp_path / "memory" / "archive" / "records.py").write_text("def g(tx):\n    tx._row('x')\n")
    assert raw_calls(tmp_path) == [
        "service.py:2 tx.row(...)",
        "service.py:3 tx.execute(...)",
        "service.py:4 .rows(...)",  # on what tx._using returned
        "service.py:4 tx._using(...)",
        "service.py:6 tx.conn",
    ]


def test_the_transactions_offer_no_public_raw_accessor() -> None:
    for transaction in (ArchiveTransaction, CatalogTransaction):
        public = {
            name
            for name in ("row", "rows", "one", "execute", "using")
            if hasattr(transaction, name)
        }
        assert public == set(), transaction.__name__
