"""The ``tht`` command: pure JSON on stdout, logs and progress on stderr.

Every command prints exactly one JSON document on stdout, also on failure
(``{"error": {"code", "message", "details"}}``), and exits with the code of its error
class (see ``tht.errors.EXIT_CODES``).
"""

from __future__ import annotations

import copy
import os
import sys
from contextlib import nullcontext, redirect_stdout
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click import exceptions as click_exceptions  # Typer vendors click

from tht import __version__, collector
from tht.cli._common import ConfigOption, IdempotencyKeyOption, JsonFlag
from tht.cli.apps import (
    GROUPS,
    app,
    db_app,
    memory_app,
    service_app,
    user_app,
    workspace_app,
)
from tht.cli.parsing import take_plain_values
from tht.cli.submit import TOKEN, path, reader_gone, recall_arguments, submit, unexpected
from tht.errors import InvalidInput, ServiceUnavailable, ThothError
from tht.memory.index.engines import engine_names, spoken
from tht.service import client

# --- memory -------------------------------------------------------------------------


@memory_app.command("list")
def memory_list(
    config: ConfigOption,
    filters: Annotated[
        str | None,
        typer.Option(
            help=(
                "JSON object: q (text or card id), family, concepts, database, schema, table, column,"
                " origin (manual|workflow: made here; imported), import (imp-<uuid>), updated_from, updated_to, sort (updated_at|created_at|title|family|relevance), order (asc|desc),"
                " page, page_size (1-100, default 20)"
            )
        ),
    ] = None,
) -> int:
    """Search, filter and paginate the workspace's archive."""
    return submit("memory.list", {"config": path(config), "filters": filters})


@memory_app.command("show")
def memory_show(
    card_id: Annotated[str, typer.Argument(help="Card id (mem-<uuid>)")], config: ConfigOption
) -> int:
    """Print a complete card: fields, dependencies, links out and in, origin, revision."""
    return submit("memory.show", {"card_id": card_id, "config": path(config)})


@memory_app.command("create")
def memory_create(
    config: ConfigOption,
    data: Annotated[str, typer.Option(help="Card JSON file ('-' for standard input)")],
    idempotency_key: IdempotencyKeyOption = None,
) -> int:
    """Create a manual card with its dependencies and links."""
    return submit(
        "memory.create",
        {"config": path(config), "data": data, "idempotency_key": idempotency_key},
    )


@memory_app.command("update")
def memory_update(
    card_id: Annotated[str, typer.Argument(help="Card id (mem-<uuid>)")],
    config: ConfigOption,
    data: Annotated[
        str,
        typer.Option(
            help="Card JSON file ('-' for standard input); 'revision' makes the save conditional"
        ),
    ],
    idempotency_key: IdempotencyKeyOption = None,
) -> int:
    """Replace a card's content, dependencies and outgoing links together."""
    return submit(
        "memory.update",
        {
            "card_id": card_id,
            "config": path(config),
            "data": data,
            "idempotency_key": idempotency_key,
        },
    )


@memory_app.command("delete")
def memory_delete(
    card_id: Annotated[str, typer.Argument(help="Card id (mem-<uuid>)")],
    config: ConfigOption,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm the deletion (required)")] = False,
    revision: Annotated[
        int | None, typer.Option(help="Delete only if the card is still at this revision")
    ] = None,
    idempotency_key: IdempotencyKeyOption = None,
) -> int:
    """Delete a card with its dependencies and incident links (other cards stay)."""
    return submit(
        "memory.delete",
        {
            "card_id": card_id,
            "config": path(config),
            "yes": yes,
            "revision": revision,
            "idempotency_key": idempotency_key,
        },
    )


@memory_app.command("pending")
def memory_pending(config: ConfigOption) -> int:
    """List incomplete projection operations (saved, not yet in the search index)."""
    return submit("memory.pending", {"config": path(config)})


@memory_app.command("retry")
def memory_retry(
    card_id: Annotated[str, typer.Argument(help="Card id (mem-<uuid>)")], config: ConfigOption
) -> int:
    """Retry a card's index work from its current state (re-index it, or remove a deleted card's point).

    Exits 8 (index_unavailable) when the work is still pending afterwards."""
    return submit("memory.retry", {"card_id": card_id, "config": path(config)})


@memory_app.command("index")
def memory_index(config: ConfigOption) -> int:
    """Rebuild the workspace's search projection (domain memory and solved questions) from the archive."""
    return submit("memory.index", {"config": path(config)})


@memory_app.command("check")
def memory_check(
    config: ConfigOption,
    repair: Annotated[
        bool, typer.Option("--repair", help="Re-index what drifted and remove orphan points")
    ] = False,
) -> int:
    """Report drift between archive and index: missing, stale, orphan and wrong-format points."""
    return submit("memory.check", {"config": path(config), "repair": repair})


FiltersOption = Annotated[
    str | None,
    typer.Option(
        "--filters",
        help="JSON object: scope (exact), concepts (all present), table, column, top (1-100, default 10)",
    ),
]
SessionFilter = Annotated[
    str | None,
    typer.Option(
        "--session", help="Workflow session: leave out Memory already decided in it (its ledger)"
    ),
]
ExplainOption = Annotated[
    str | None,
    typer.Option(
        "--explain",
        metavar="CARD_ID",
        help="A card id: say why it is or is not among the results (binding, scope, family, decided, pending, rank)",
    ),
]
ViewOption = Annotated[
    str | None,
    typer.Option(
        "--view",
        metavar="full|compact",
        help="full (default): each card whole, with `score` and `retrieval`; compact: what an"
        " agent needs of each card (no null or empty field), with its `similarity`",
    ),
]
# what the numbers of a recall answer mean, in each recall command's help
SCORES = (
    "\n\nEach result carries `score`, its ranking score: 1/(60 + r), r its place once the"
    " dense, BM25 and coverage ranks are fused, plus half the score of a card linking to it"
    " (a quarter at two hops). It orders this answer and says nothing about relevance: the"
    " first result scores 1/61 = 0.0164 whether or not it is relevant. `retrieval.similarity`"
    " (`similarity` with `--view compact`) is the cosine similarity of the question and the"
    " card, 0 to 1: what tells a relevant card from filler (docs/recall.md gives its measured"
    " meaning)."
)


def _recall(name: str, question: str | None, config: Path, filters: str | None, **more: Any) -> int:
    # tht.cli.entry parses the same lines without Typer: its RECALL_LINES names these
    # options too (a test holds the two to the same arguments)
    return submit(name, recall_arguments(question, str(config), filters, **more))


@memory_app.command(
    "search",
    help="Recall domain clarifications for a question. `--filters '{\"families\": [...]}'`"
    " widens it explicitly to SQL rules and explained errors (`memory rules` serves those)."
    " Results are verified against the archive." + SCORES,
)
def memory_search(
    question: Annotated[str, typer.Argument(help="The user's question")],
    config: ConfigOption,
    filters: FiltersOption = None,
    json_output: JsonFlag = False,
    session: SessionFilter = None,
    explain: ExplainOption = None,
    view: ViewOption = None,
) -> int:
    return _recall(
        "memory.search", question, config, filters, session=session, explain=explain, view=view
    )


@memory_app.command(
    "solved-search",
    help="Recall solved questions (consultative exemplars: never an approval)." + SCORES,
)
def memory_solved_search(
    question: Annotated[str, typer.Argument(help="The user's question")],
    config: ConfigOption,
    filters: FiltersOption = None,
    json_output: JsonFlag = False,
    explain: ExplainOption = None,
    view: ViewOption = None,
) -> int:
    return _recall("memory.solved-search", question, config, filters, explain=explain, view=view)


@memory_app.command(
    "rules",
    help="Recall SQL rules and explained errors that apply to a question (or to a database"
    " error)." + SCORES,
)
def memory_rules(
    question: Annotated[
        str | None, typer.Argument(help="The user's question (optional with --error)")
    ] = None,
    config: ConfigOption = ...,  # type: ignore[assignment]  # required: Typer's idiom after an optional argument
    filters: FiltersOption = None,
    json_output: JsonFlag = False,
    session: SessionFilter = None,
    error: Annotated[
        str | None,
        typer.Option(
            "--error",
            help="A database error text: exact error-signature matches first, then recall",
        ),
    ] = None,
    explain: ExplainOption = None,
    view: ViewOption = None,
) -> int:
    return _recall(
        "memory.rules",
        question,
        config,
        filters,
        session=session,
        error=error,
        explain=explain,
        view=view,
    )


import tht.cli.eval  # noqa: E402  (memory eval, registered here: the help lists it so)


@memory_app.command("migrate")
def memory_migrate(
    engine: Annotated[
        str | None,
        typer.Option(
            help="Also prepare this index engine's tables: "
            + spoken(engine_names(with_tables=True))
            + " (its extension must exist, created by a superuser; the embedded server creates"
            f" it). {spoken(engine_names(with_tables=False), 'and')} need nothing in PostgreSQL."
        ),
    ] = None,
) -> int:
    """Apply the memory migration pack with the migrator login (same as python -m tht.memory.migrate)."""
    return submit("memory.migrate", {"engine": engine})


# --- workspaces ---------------------------------------------------------------------


@workspace_app.command("create")
def workspace_create(
    workspace_id: Annotated[
        str, typer.Argument(help="Workspace id: lowercase letters, digits, '-', '_'")
    ],
    language: Annotated[
        str, typer.Option(help="Language of the cards: en or it (text search and BM25)")
    ],
    name: Annotated[str | None, typer.Option(help="Display name (default: the id)")] = None,
    embedder: Annotated[
        str,
        typer.Option(
            help="The installation's embedder profile the workspace's vectors come from"
            " (`embedders:` in its configuration)"
        ),
    ] = "default",
) -> int:
    """Create a workspace with its language and embedder profile."""
    return submit(
        "workspace.create",
        {"workspace_id": workspace_id, "language": language, "name": name, "embedder": embedder},
    )


@workspace_app.command("embedder")
def workspace_embedder(
    workspace_id: Annotated[str, typer.Argument(help="Workspace id")],
    profile: Annotated[
        str, typer.Argument(help="One of the installation's embedder profiles (`embedders:`)")
    ],
) -> int:
    """Switch the workspace to another embedder profile: every card is projected with it
    beside the serving index, and the workspace switches when that is complete (recall
    goes on meanwhile). Refused while the workspace is being rebuilt."""
    return submit("workspace.embedder", {"workspace_id": workspace_id, "profile": profile})


@workspace_app.command("list")
def workspace_list() -> int:
    """List workspaces (ids, names, languages)."""
    return submit("workspace.list", {})


@workspace_app.command("show")
def workspace_show(workspace_id: Annotated[str, typer.Argument(help="Workspace id")]) -> int:
    """Show a workspace with its card counts per family and pending index work."""
    return submit("workspace.show", {"workspace_id": workspace_id})


# --- accounts -----------------------------------------------------------------------


@user_app.command("create")
def user_create(
    name: Annotated[str, typer.Argument(help="User name (letters, digits, . _ @ -)")],
    role: Annotated[
        str,
        typer.Option(
            help=(
                "admin (everything), user (read the archive and recall) or agent (recall and propose: search,"
                " rules, solved-search, propose, summary, solved-index)"
            )
        ),
    ],
    workspace: Annotated[
        list[str], typer.Option(help="A workspace the user belongs to (repeat the option)")
    ],
    password_file: Annotated[
        Path | None, typer.Option(help="File holding a password for the login form")
    ] = None,
    expires_in: Annotated[
        str | None,
        typer.Option(help="How long the token lives: 12h, 30d, 8w or never (default 90d)"),
    ] = None,
) -> int:
    """Create a user; prints its API bearer token (shown once) and when it expires."""
    return submit(
        "user.create",
        {
            "name": name,
            "role": role,
            "workspace": workspace,
            "password_file": path(password_file),
            "expires_in": expires_in,
        },
    )


@user_app.command("list")
def user_list() -> int:
    """List users with their role and workspaces (never their secrets)."""
    return submit("user.list", {})


@memory_app.command("admin")
def memory_admin(
    workspace: Annotated[str, typer.Option(help="The workspace the protected request must be for")],
    config: Annotated[
        Path,
        typer.Option("-c", "--config", help="The protected request (signed JSON); '-' for stdin"),
    ],
) -> int:
    """Execute an administrative operation from a signed protected request (backend use)."""
    return submit("memory.admin", {"workspace": workspace, "config": path(config)})


# The web server's limits and trust, options of `tht serve` (declared here so the command
# reads as what it does).
HeaderTimeout = Annotated[
    float,
    typer.Option(
        min=0.1, help="Seconds a client has to send a request's head; then the connection is closed"
    ),
]
BodyTimeout = Annotated[
    float,
    typer.Option(
        min=0.1,
        help="Seconds a client has to send a request's body; then 408 and the connection is closed",
    ),
]
MaxConnections = Annotated[
    int,
    typer.Option(min=1, help="Open connections (or requests) beyond which new requests get 503"),
]
MaxConnectionsPerClient = Annotated[
    int,
    typer.Option(
        min=1,
        help="Open connections one client address may hold (through a --trusted-proxy:"
        " requests in progress of the client it names); beyond them 429 and closed",
    ),
]
PublicOrigins = Annotated[
    list[str] | None,
    typer.Option(
        "--public-origin",
        help="scheme://host[:port] the pages are reached at (repeatable); cookie-authenticated "
        "writes must come from one. Default: the served http(s)://host:port",
    ),
]
TrustedProxies = Annotated[
    list[str] | None,
    typer.Option(
        "--trusted-proxy",
        help="Address or network (CIDR) of a reverse proxy whose X-Forwarded-For names the "
        "client (repeatable). Default: none, the TCP peer is the client",
    ),
]


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port")] = 8765,
    demo: Annotated[
        bool, typer.Option("--demo", help="Load the demo workspace (BIRD Mini-Dev evidence) first")
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            "-c",
            "--config",
            help="The installation's configuration (default: $THT_CONFIG, else $THT_HOME/config.yaml)",
        ),
    ] = None,
    secure: Annotated[
        bool, typer.Option("--secure", help="Served behind HTTPS: Secure, __Host- session cookie")
    ] = False,
    web: Annotated[
        bool,
        typer.Option(
            "--web/--no-web",
            help="Serve the pages and the HTTP API (--no-web: only the"
            " local socket, for an agent host)",
        ),
    ] = True,
    idle_timeout: Annotated[
        float, typer.Option(min=0, help="Exit after this many seconds without a command (0: never)")
    ] = 0,
    header_timeout: HeaderTimeout = 10.0,
    body_timeout: BodyTimeout = 30.0,
    max_connections: MaxConnections = 200,
    max_connections_per_client: MaxConnectionsPerClient = 50,
    public_origin: PublicOrigins = None,
    trusted_proxy: TrustedProxies = None,
) -> int:
    """Run the installation's service: it owns the engines and serves the CLI's socket,
    the administration pages and the HTTP API (the embedded engines, or the configured ones)."""
    from tht.cli.submit import configure_logging
    from tht.errors import ConfigurationError
    from tht.web.guard import public_origins
    from tht.web.limits import ServerLimits, trusted_proxies
    from tht.web.server import run_server

    try:
        origins = public_origins(public_origin or [])
    except ValueError as exc:
        raise ConfigurationError(f"--public-origin: {exc}") from exc
    try:
        proxies = trusted_proxies(trusted_proxy or [])
    except ValueError as exc:
        raise ConfigurationError(f"--trusted-proxy: {exc}") from exc
    configure_logging()
    limits = ServerLimits(
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        max_connections=max_connections,
        max_connections_per_client=max_connections_per_client,
    )
    run_server(
        host=host,
        port=port,
        demo=demo,
        config=config,
        secure=secure,
        web=web,
        idle_timeout=idle_timeout,
        limits=limits,
        public_origins=origins,
        proxies=proxies,
    )
    return 0


# --- embedded database --------------------------------------------------------------


@db_app.command("status")
def db_status() -> int:
    """Where the embedded PostgreSQL lives and whether it is running."""
    return submit("db.status", {})


@db_app.command("stop")
def db_stop() -> int:
    """Stop the embedded PostgreSQL (the next command starts it again)."""
    return submit("db.stop", {})


# --- the service ----------------------------------------------------------------------


@service_app.command("status")
def service_status() -> int:
    """Whether a service runs for THT_HOME, and which: its pid, the URL of its pages
    (`tht serve`), whether a command auto-started it (it then exits after
    `idle_timeout` idle seconds), its socket, the commands running in it
    (`active`), and its garbage collector: the objects it froze once started, out of
    the cyclic collector's reach, and its thresholds (`collector`). Exit 0 either way
    (`running`: false when none runs); it never starts one."""
    from tht.service import paths

    home = paths.default_home(os.environ)
    running = client.running_service(home)
    if running is None:
        client.emit({"running": False, "home": home})
    else:
        client.emit({"running": True, "home": home, **running})
    return 0


@service_app.command("stop")
def service_stop(
    timeout: Annotated[
        float,
        typer.Option(min=1, help="Seconds to wait for it to stop (running commands finish first)"),
    ] = 90.0,
) -> int:
    """Stop the service of THT_HOME (`tht serve`, `--no-web`, or one a command started):
    it lets its pending index work and its running commands finish (at most 30 s each),
    closes the engines and removes its socket. The embedded PostgreSQL keeps running (`tht db stop`). Exit 0 also when
    none was running (`stopped`: false)."""
    from tht.service import paths

    home = paths.default_home(os.environ)
    running = client.running_service(home)
    if running is None or not client.stop_service(home, timeout=timeout):
        client.emit({"stopped": False, "running": False, "home": home})
    else:
        client.emit({"stopped": True, "pid": running.get("pid"), "home": home})
    return 0


# --- demo ---------------------------------------------------------------------------


@app.command("health")
def health() -> int:
    """How the running service (`tht serve`, also with `--no-web`) finds its dependencies:
    the archive, each index and each embedder, with status and latency, as `/healthz`
    answers. Exit 0 when ok or degraded (only an index or an embedder down), 10 when the
    archive is down or no service runs for THT_HOME. It never starts a service."""
    from tht.service import paths

    home = paths.default_home(os.environ)
    answer = client.service_health(home)
    if answer is None:
        raise ServiceUnavailable(
            f"no service is running for THT_HOME={home}", details={"home": home}
        )
    http_status, document = answer
    client.emit(document)
    return 0 if http_status == 200 else ServiceUnavailable.exit_code


@app.command("demo")
def demo() -> int:
    """Create a demo workspace with a few cards (once) and print them."""
    return submit("demo", {})


# --- entry point --------------------------------------------------------------------


def _names_a_group(command: Any, args: list[str]) -> bool:
    for arg in args:
        commands = getattr(command, "commands", None)
        if arg.startswith("-") or commands is None or arg not in commands:
            return False
        command = commands[arg]
    return hasattr(command, "commands")


# (group, command): its parser; "" for the whole tree, or for the whole group
_parsers: dict[tuple[str, str], Any] = {}


def _parser(args: list[str]) -> tuple[Any, list[str], str]:
    """The parser of the command the line names, as its group holding it alone, its
    arguments and program name; the whole group when the line names none of its
    commands (its help, a sub-group, a mistyped name), the whole tree for anything
    else. Typer builds a group's every command: the memory group's 23 take about 14
    ms, one about 1 ms."""
    group = args[0] if args and args[0] in GROUPS else ""
    name = args[1] if group and len(args) > 1 else ""
    if (group, name) not in _parsers:
        typer_app = GROUPS[group] if group else app
        named = [
            info
            for info in typer_app.registered_commands
            if name
            and (info.name or typer.main.get_command_name(getattr(info.callback, "__name__", "")))
            == name
        ]
        if len(named) == 1:
            alone = copy.copy(typer_app)  # the group's settings, with that command only
            alone.registered_commands, alone.registered_groups = named, []
            # a group still (Typer makes an app of one command that command itself)
            built: Any = typer.main.get_group(alone)
        else:
            name = ""
            built = typer.main.get_command(typer_app)
        _parsers[group, name] = take_plain_values(built)
    if group:
        return _parsers[group, name], args[1:], f"tht {group}"
    return _parsers[group, name], args, "tht"


def main(argv: list[str] | None = None, *, token: str | None = None) -> int:
    """The ``tht`` command: parse the command line, then run the command where it runs
    (``submit``). ``token`` names its principal (None: ``--token-file``,
    ``THT_TOKEN_FILE`` or ``THT_TOKEN``, and without any the operator). The program's
    entry is ``tht.cli.entry.main``, which reads the agent's recall lines itself."""
    if argv is None:  # run as the program (`tht`, `python -m tht`), not called in a process
        collector.hold_during_start()
    return run_line(sys.argv[1:] if argv is None else list(argv), token)


def run_line(args: list[str], token: str | None) -> int:
    """A command line parsed by Typer and run."""
    try:
        return _main(args, token)
    except BrokenPipeError:
        return reader_gone()


def _main(args: list[str], token: str | None) -> int:
    try:
        args, given = client.read_token(args, os.environ)
        if args == ["--version"]:
            client.emit({"version": __version__})
            return 0
        command, args, prog = _parser(args)
        # A group without its command: Typer prints the group's help to stdout while
        # raising, and stdout carries only the JSON error, so the help goes to stderr.
        grouped = _names_a_group(command, args)
        bound = TOKEN.set(token if token is not None else given)
        try:
            with redirect_stdout(sys.stderr) if grouped else nullcontext():
                result = command.main(args=args, prog_name=prog, standalone_mode=False)
        finally:
            TOKEN.reset(bound)
        return result if isinstance(result, int) else 0
    except typer.Exit as exc:
        return exc.exit_code
    except click_exceptions.NoArgsIsHelpError:
        error: ThothError = InvalidInput("a command is required: see the help on stderr")
    except click_exceptions.ClickException as exc:
        error = InvalidInput(exc.format_message())
    except typer.Abort:
        error = InvalidInput("aborted")
    except ThothError as exc:
        error = exc
    except Exception as exc:  # the last line of defence: JSON, never a traceback on stdout
        error = unexpected(exc)
    client.emit(error.to_dict())
    return error.exit_code


# the command modules that register themselves on the groups above (imported for that)
import tht.cli.accounts  # noqa: E402  (user grant/revoke/role/token/delete, audit)
import tht.cli.catalog  # noqa: E402  (catalog)
import tht.cli.curation  # noqa: E402  (memory benchmark, gaps, recalls)
import tht.cli.mcp  # noqa: E402  (mcp)
import tht.cli.transfer  # noqa: E402  (memory import, imports, export)
import tht.cli.workflow  # noqa: E402, F401  (last, as before: propose, summary, review-apply, solved-index)

if __name__ == "__main__":
    raise SystemExit(main())
