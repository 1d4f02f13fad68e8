"""The layers of src/tht and the direction of their imports, read from the source
(ast: no module is imported). See docs/architecture.md.

    faces → commands → wiring → application → domain, ports, adapters, shared

A module imports only modules of its own layer or of the layers to its right; the
domain and the ports import no adapter. Among the faces and the commands no module
imports itself back through others, and no face package (cli, service, web, mcp,
memory_client) imports another that imports it back. Every import counts, also one
inside a function; one under ``if TYPE_CHECKING:`` does not (it runs nowhere).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[2] / "src"

FACES = 4
COMMANDS = 3
WIRING = 2
APPLICATION = 1
LOWER = 0  # the domain, the ports, the adapters and what every layer shares

LAYER_NAMES = {
    FACES: "faces",
    COMMANDS: "commands",
    WIRING: "wiring",
    APPLICATION: "application",
    LOWER: "domain/ports/adapters",
}
# module prefixes: "tht.cli" is the package and every module in it
FACE_MODULES = (
    "tht.cli",
    "tht.service",
    "tht.web",
    "tht.mcp",
    "tht.memory_client",
    "tht.__main__",
    "tht.memory.migrate",  # `python -m tht.memory.migrate`: an entry point
)
FACE_PACKAGES = ("tht.cli", "tht.service", "tht.web", "tht.mcp", "tht.memory_client")
COMMAND_MODULES = ("tht.commands",)
WIRING_MODULES = ("tht.bootstrap",)
DOMAIN_AND_PORTS = (
    "tht.memory.model",
    "tht.memory.recall",
    "tht.memory.recall_filters",
    "tht.memory.recall_explain",
    "tht.memory.projection_format",
    "tht.memory.error_signature",
    "tht.memory.stages",
    "tht.memory.embedding.sparse",
    "tht.memory.transfer.formats",
    "tht.memory.transfer.streams",
    "tht.memory.transfer.sql_check",
    "tht.catalog.model",
    "tht.workflow.contract",
    "tht.memory.archive.port",
    "tht.memory.index.port",
    "tht.memory.index.errors",
    "tht.memory.embedding.port",
    "tht.memory.embedding.errors",
)
ADAPTERS = (
    "tht.memory.archive",
    "tht.memory.index",
    "tht.memory.embedding",
    "tht.memory.migrations",
    "tht.db",
    "tht.catalog.store",
    "tht.catalog.scan",
    "tht.catalog.migrations",
)
SHARED = (
    "tht.collector",
    "tht.errors",
    "tht.validation",
    "tht.faults",
    "tht.audit",
    "tht.lazy",
    "tht.sqlfiles",
    "tht.backoff",
    "tht.home",
    "tht.settings",
    "tht.installation",
)


def _within(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer(module: str) -> int:
    if _within(module, FACE_MODULES):
        return FACES
    if _within(module, COMMAND_MODULES):
        return COMMANDS
    if _within(module, WIRING_MODULES):
        return WIRING
    if module == "tht" or _within(module, (*DOMAIN_AND_PORTS, *ADAPTERS, *SHARED)):
        return LOWER
    return APPLICATION  # the services: tht.memory.card_store, tht.workflow.review, ...


def is_adapter(module: str) -> bool:
    return _within(module, ADAPTERS) and not _within(module, DOMAIN_AND_PORTS)


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(root: Path) -> dict[str, dict[str, int]]:
    """Each module's imports of modules of the package: target -> line."""
    known = modules(root)
    graph: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and _type_checking(node)
            for inner in ast.walk(node)
            if inner is not node.test
        }
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: dict[str, int] = {}
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([base] if base else [])])
                named = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for target in named:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.setdefault(target, node.lineno)
        graph[name] = targets
    return graph


def against_the_layers(graph: dict[str, dict[str, int]]) -> list[str]:
    wrong = []
    for source, targets in sorted(graph.items()):
        for target, line in sorted(targets.items()):
            if layer(target) > layer(source):
                wrong.append(
                    f"{source}:{line} imports {target}"
                    f" ({LAYER_NAMES[layer(source)]} -> {LAYER_NAMES[layer(target)]})"
                )
            elif _within(source, DOMAIN_AND_PORTS) and is_adapter(target):
                wrong.append(f"{source}:{line} imports {target} (domain/ports -> adapter)")
    return wrong


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in graph:
                    continue
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def face_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Import circles among the modules of the faces and the commands, and among the
    face packages."""
    faces = {m for m in graph if layer(m) in (FACES, COMMANDS)}
    by_module = {m: {t for t in graph[m] if t in faces} for m in faces}

    def package(module: str) -> str | None:
        return next((p for p in FACE_PACKAGES if _within(module, (p,))), None)

    by_package: dict[str, set[str]] = {p: set() for p in FACE_PACKAGES}
    for source, targets in graph.items():
        for target in targets:
            a, b = package(source), package(target)
            if a is not None and b is not None and a != b:
                by_package[a].add(b)
    return cycles(by_module) + cycles(by_package)


# The packages of tht (a top-level module counts as a package), lowest first. A package
# imports only packages of lower tiers; the packages of one tier import none of each other.
PACKAGE_TIERS: tuple[tuple[str, ...], ...] = (
    (
        "tht.errors",
        "tht.collector",
        "tht.lazy",
        "tht.faults",
        "tht.sqlfiles",
        "tht.backoff",
        "tht.home",
    ),
    ("tht.validation", "tht", "tht.audit"),
    ("tht.db",),  # the database: connections, the migration runner, the embedded server
    ("tht.memory",),  # cards, the archive, the index, recall, transfer, the memory packs
    ("tht.settings",),
    ("tht.installation",),
    ("tht.catalog", "tht.accounts"),
    ("tht.access",),  # the accounts over the archive: users, tokens, sessions, audit
    # what a person or an agent may do, the capability checked again: over memory and
    # the accounts (the workflow is reached through the engines' Services, not imported)
    ("tht.usecases",),
    ("tht.protected",),
    ("tht.workflow", "tht.demo"),
    ("tht.bootstrap",),
    ("tht.commands",),
    ("tht.service",),
    ("tht.mcp", "tht.memory_client"),
    ("tht.web",),
    ("tht.cli",),
    ("tht.__main__",),
)
# Imports that go up the tiers, each with why it stays for now: (module, imported module).
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("tht.memory.migrate", "tht.cli.main"): (
        "the documented entry point `python -m tht.memory.migrate` runs `tht memory migrate`"
    ),
}


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def against_the_package_order(
    graph: dict[str, dict[str, int]],
    tiers: tuple[tuple[str, ...], ...] = PACKAGE_TIERS,
    exceptions: Iterable[tuple[str, str]] = (),
) -> list[str]:
    tier = {package: rank for rank, members in enumerate(tiers) for package in members}
    allowed = set(exceptions)
    wrong = []
    for source, targets in sorted(graph.items()):
        mine = package_of(source)
        if mine not in tier:
            wrong.append(f"{mine} is in no tier of PACKAGE_TIERS")
            continue
        for target, line in sorted(targets.items()):
            theirs = package_of(target)
            if theirs == mine or (source, target) in allowed:
                continue
            if theirs not in tier or tier[theirs] >= tier[mine]:
                wrong.append(f"{source}:{line} imports {target} ({mine} -> {theirs})")
    return sorted(set(wrong))


def test_the_packages_import_only_lower_tiers() -> None:
    assert against_the_package_order(imports(SOURCE), exceptions=KNOWN_EXCEPTIONS) == []


def test_every_known_exception_is_still_an_import() -> None:
    graph = imports(SOURCE)
    stale = [pair for pair in KNOWN_EXCEPTIONS if pair[1] not in graph.get(pair[0], {})]
    assert stale == []  # an exception that no longer happens is removed from the list


def test_the_package_order_sees_what_it_forbids() -> None:
    graph = {
        "tht.db.embedded": {"tht.memory.migrations": 3},
        "tht.memory.migrations": {"tht.db.migrations": 5},
        "tht.memory.agent": {"tht.accounts": 7},
        "tht.newcomer": {},
        "tht.db.migrations": {},
    }
    tiers = (("tht.db",), ("tht.memory",), ("tht.accounts",))
    assert against_the_package_order(graph, tiers) == [
        "tht.db.embedded:3 imports tht.memory.migrations (tht.db -> tht.memory)",
        "tht.memory.agent:7 imports tht.accounts (tht.memory -> tht.accounts)",
        "tht.newcomer is in no tier of PACKAGE_TIERS",
    ]
    allowed = [("tht.memory.agent", "tht.accounts")]
    assert against_the_package_order(graph, tiers, allowed) == [
        "tht.db.embedded:3 imports tht.memory.migrations (tht.db -> tht.memory)",
        "tht.newcomer is in no tier of PACKAGE_TIERS",
    ]


def test_no_import_goes_against_the_layers() -> None:
    assert against_the_layers(imports(SOURCE)) == []


def test_the_faces_and_the_commands_form_no_import_circle() -> None:
    assert face_cycles(imports(SOURCE)) == []


def test_the_commands_table_imports_nothing_but_the_standard_library() -> None:
    graph = imports(SOURCE)
    assert set(graph["tht.commands.table"]) == set()
    tree = ast.parse((SOURCE / "tht" / "commands" / "table.py").read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        if node.module
    }
    assert imported <= {"__future__", "os", "collections", "dataclasses", "typing"}


def test_the_checks_see_what_they_forbid(tmp_path: Path) -> None:
    # an empty answer proves nothing unless the checks find a planted violation
    package = tmp_path / "tht"
    for folder in ("cli", "service", "commands", "memory"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "cli" / "main.py").write_text("from tht.service import client\n")
    (package / "service" / "client.py").write_text(
        "def run():\n    from tht.cli.main import main\n"  # a lazy import counts
    )
    (package / "commands" / "memory.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tht.cli import main\n"
    )
    (package / "memory" / "model.py").write_text("from tht.memory.archive.postgres import Pg\n")
    (package / "memory" / "archive").mkdir()
    (package / "memory" / "archive" / "__init__.py").write_text("")
    (package / "memory" / "archive" / "postgres.py").write_text("from ..card_store import x\n")
    (package / "memory" / "card_store.py").write_text("import tht.commands.memory\n")
    graph = imports(tmp_path)
    assert graph["tht.commands.memory"] == {}  # only for the type checker
    assert against_the_layers(graph) == [
        "tht.memory.archive.postgres:1 imports tht.memory.card_store"
        " (domain/ports/adapters -> application)",
        "tht.memory.card_store:1 imports tht.commands.memory (application -> commands)",
        "tht.memory.model:1 imports tht.memory.archive.postgres (domain/ports -> adapter)",
    ]
    assert face_cycles(graph) == [
        ["tht.cli.main", "tht.service.client"],
        ["tht.cli", "tht.service"],
    ]
