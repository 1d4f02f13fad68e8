"""The ``tht`` command: pure JSON on stdout, logs and progress on stderr.

Every command prints exactly one JSON document on stdout, also on failure
(``{"error": {"code", "message", "details"}}``), and exits with the code of its error
class (see ``tht.errors.EXIT_CODES``).
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import nullcontext, redirect_stdout
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click import exceptions as click_exceptions  # Typer vendors click

from tht import audit
from tht.accounts import MANAGE
from tht.cli._common import (  # the shared helpers; other command modules import them from there
    ConfigOption,
    IdempotencyKeyOption,
    JsonFlag,
    _read_document,
    _services,
    emit,
    idempotency_key_of,
    load_runtime,
    read_text,
)
from tht.cli.capabilities import OPERATOR_ONLY, required
from tht.cli.catalog import catalog_app
from tht.cli.eval import memory_eval
from tht.cli.invocation import current, invoked, progress
from tht.cli.workflow import register as register_workflow
from tht.errors import Forbidden, InvalidInput, ServiceUnavailable, ThothError
from tht.memory.model import parse_card_input, parse_list_query
from tht.settings import RuntimeConfig

if TYPE_CHECKING:
    from tht.db.embedded import EmbeddedPostgres
    from tht.memory.recall_service import RecallKind

log = logging.getLogger("tht")

app = typer.Typer(
    help="Thoth Memory: the reusable knowledge of a text-to-SQL agent. Every command prints one JSON document.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
memory_app = typer.Typer(
    help="Cards of one workspace: browse, edit, and the projection's pending work.",
    no_args_is_help=True,
)
workspace_app = typer.Typer(help="Workspaces: create, list and inspect.", no_args_is_help=True)
db_app = typer.Typer(
    help="The embedded PostgreSQL in THT_HOME (status, stop).", no_args_is_help=True
)
user_app = typer.Typer(help="Local accounts of the web administration.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")
app.add_typer(workspace_app, name="workspace")
app.add_typer(db_app, name="db")
app.add_typer(user_app, name="user")
app.add_typer(catalog_app, name="catalog")


def _json_argument(text: str | None, option: str) -> Any:
    if text is None:
        return None
    from tht.validation import parse_json

    return parse_json(text, option)


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
) -> None:
    """Search, filter and paginate the workspace's archive."""
    runtime = load_runtime(config)
    query = parse_list_query(_json_argument(filters, "--filters"))
    with _services(runtime) as services:
        emit(services.memory.list_cards(runtime.workspace, query).as_json())


@memory_app.command("show")
def memory_show(
    card_id: Annotated[str, typer.Argument(help="Card id (mem-<uuid>)")], config: ConfigOption
) -> None:
    """Print a complete card: fields, dependencies, links out and in, origin, revision."""
    runtime = load_runtime(config)
    with _services(runtime) as services:
        emit(services.memory.get_card(runtime.workspace, card_id).as_json())


@memory_app.command("create")
def memory_create(
    config: ConfigOption,
    data: Annotated[str, typer.Option(help="Card JSON file ('-' for standard input)")],
    idempotency_key: IdempotencyKeyOption = None,
) -> None:
    """Create a manual card with its dependencies and links."""
    runtime = load_runtime(config)
    card = parse_card_input(_read_document(data))
    with _services(runtime) as services:
        key = idempotency_key_of(idempotency_key)
        emit(services.memory.create_card(runtime.workspace, card, idempotency=key).as_json())


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
) -> None:
    """Replace a card's content, dependencies and outgoing links together."""
    runtime = load_runtime(config)
    from tht.memory.model import card_id_to_uuid, uuid_to_card_id

    card_id = uuid_to_card_id(card_id_to_uuid(card_id))
    card = parse_card_input(_read_document(data), card_id=card_id, workspace=runtime.workspace)
    with _services(runtime) as services:
        key = idempotency_key_of(idempotency_key)
        emit(
            services.memory.update_card(runtime.workspace, card_id, card, idempotency=key).as_json()
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
) -> None:
    """Delete a card with its dependencies and incident links (other cards stay)."""
    runtime = load_runtime(config)
    if not yes:
        raise InvalidInput(f"refusing to delete {card_id} without --yes")
    with _services(runtime) as services:
        key = idempotency_key_of(idempotency_key)
        emit(
            services.memory.delete_card(
                runtime.workspace, card_id, revision, idempotency=key
            ).as_json()
        )


@memory_app.command("pending")
def memory_pending(config: ConfigOption) -> None:
    """List incomplete projection operations (saved, not yet in the search index)."""
    runtime = load_runtime(config)
    with _services(runtime) as services:
        items = services.memory.pending(runtime.workspace)
        emit({"items": [item.model_dump(mode="json") for item in items]})


@memory_app.command("retry")
def memory_retry(
    card_id: Annotated[str, typer.Argument(help="Card id (mem-<uuid>)")], config: ConfigOption
) -> None:
    """Retry a card's index work from its current state (re-index it, or remove a deleted card's point).

    Exits 8 (index_unavailable) when the work is still pending afterwards."""
    from tht.memory.admin import retry_index_work

    runtime = load_runtime(config)
    with _services(runtime) as services:
        retried = retry_index_work(services.projector, runtime.workspace, card_id)
    emit(retried)


@memory_app.command("index")
def memory_index(config: ConfigOption) -> None:
    """Rebuild the workspace's search projection (domain memory and solved questions) from the archive."""
    from tht.cli.progress_rate import RateProgress
    from tht.errors import Interrupted

    runtime = load_runtime(config)
    with _services(runtime) as services:
        try:
            emit(services.projector.rebuild(runtime.workspace, RateProgress(progress)))
        except Interrupted as exc:  # the resume command needs this invocation's runtime file
            exc.details["resume"] = f"tht memory index -c {config}"
            raise


@memory_app.command("check")
def memory_check(
    config: ConfigOption,
    repair: Annotated[
        bool, typer.Option("--repair", help="Re-index what drifted and remove orphan points")
    ] = False,
) -> None:
    """Report drift between archive and index: missing, stale, orphan and wrong-format points."""
    runtime = load_runtime(config)
    with _services(runtime) as services:
        emit(services.projector.check(runtime.workspace, repair=repair))


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
        help="A card id: say why it is or is not among the results (binding, scope, family, decided, pending, rank)",
    ),
]


def _recall(
    kind: RecallKind,
    question: str | None,
    config: Path,
    filters: str | None,
    session: str | None = None,
    error: str | None = None,
    explain: str | None = None,
) -> None:
    from tht.memory.agent import DwhBinding, recall_binding, recall_command
    from tht.memory.recall_service import parse_recall_query

    runtime = load_runtime(config)
    query = parse_recall_query(_json_argument(filters, "--filters"))
    with _services(runtime) as services:  # the operator: no principal, the runtime file's binding
        emit(
            recall_command(
                services,
                runtime.workspace,
                kind,
                question,
                query,
                session=session,
                error=error,
                explain=explain,
                binding=recall_binding(
                    services, runtime.workspace, DwhBinding(runtime.database, runtime.schema_name)
                ),
            )
        )


@memory_app.command("search")
def memory_search(
    question: Annotated[str, typer.Argument(help="The user's question")],
    config: ConfigOption,
    filters: FiltersOption = None,
    json_output: JsonFlag = False,
    session: SessionFilter = None,
    explain: ExplainOption = None,
) -> None:
    """Recall domain clarifications for a question (F2). `--filters '{"families": [...]}'`
    widens it explicitly to SQL rules and explained errors (`memory rules` serves those).

    Results are verified against the archive; `score` is a ranking score, not a similarity."""
    _recall("search", question, config, filters, session, explain=explain)


@memory_app.command("solved-search")
def memory_solved_search(
    question: Annotated[str, typer.Argument(help="The user's question")],
    config: ConfigOption,
    filters: FiltersOption = None,
    json_output: JsonFlag = False,
    explain: ExplainOption = None,
) -> None:
    """Recall solved questions (consultative exemplars: never an approval)."""
    _recall("solved", question, config, filters, explain=explain)


@memory_app.command("rules")
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
) -> None:
    """Recall SQL rules and explained errors that apply to a question (or to a database error)."""
    _recall("rules", question, config, filters, session, error, explain)


memory_app.command("eval")(memory_eval)


@memory_app.command("migrate")
def memory_migrate(
    engine: Annotated[
        str | None,
        typer.Option(
            help="Also prepare this index engine's tables: pgvector (its extension must exist, created by a"
            " superuser; the embedded server creates it). edge and qdrant need nothing in PostgreSQL."
        ),
    ] = None,
) -> None:
    """Apply the memory migration pack with the migrator login (same as python -m tht.memory.migrate)."""
    from tht.bootstrap import run_migrations

    if engine not in (None, "edge", "qdrant", "pgvector"):
        raise InvalidInput(f"unknown index engine '{engine}' (expected edge, qdrant or pgvector)")
    emit(run_migrations(engine=engine))


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
) -> None:
    """Create a workspace with its language and embedder profile."""
    with _services() as services:
        created = services.workspaces.create(workspace_id, language, name, embedder)
        principal = current().principal
        if principal is not None:  # a token's admin administers what it creates (audited)
            services.accounts.grant(principal.user, created.id)
        emit(created.model_dump(mode="json"))


@workspace_app.command("embedder")
def workspace_embedder(
    workspace_id: Annotated[str, typer.Argument(help="Workspace id")],
    profile: Annotated[
        str, typer.Argument(help="One of the installation's embedder profiles (`embedders:`)")
    ],
) -> None:
    """Switch the workspace to another embedder profile: every card is projected with it
    beside the serving index, and the workspace switches when that is complete (recall
    goes on meanwhile). Refused while the workspace is being rebuilt."""
    from tht.cli.progress_rate import RateProgress

    with _services(workspace=workspace_id) as services:
        emit(services.projector.switch(workspace_id, profile, RateProgress(progress)))


@workspace_app.command("list")
def workspace_list() -> None:
    """List workspaces (ids, names, languages)."""
    with _services() as services:
        principal = current().principal
        emit(
            {
                "items": [
                    w.model_dump(mode="json")
                    for w in services.workspaces.list()
                    if principal is None or w.id in principal.workspaces
                ]
            }
        )


@workspace_app.command("show")
def workspace_show(workspace_id: Annotated[str, typer.Argument(help="Workspace id")]) -> None:
    """Show a workspace with its card counts per family and pending index work."""
    with _services(workspace=workspace_id) as services:
        emit(services.workspaces.show(workspace_id).as_json())


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
) -> None:
    """Create a user; prints its API bearer token (shown once) and when it expires."""
    password = None
    if password_file is not None:
        password = read_text(str(password_file), 4096).rstrip("\r\n")
    with _services() as services:
        principal = current().principal
        for each in workspace if principal is not None else ():
            principal.require(MANAGE, each)  # an admin gives access only to what it administers
        emit(services.accounts.create_user(name, role, workspace, password, expires_in=expires_in))


@user_app.command("list")
def user_list() -> None:
    """List users with their role and workspaces (never their secrets)."""
    with _services() as services:
        emit({"items": services.accounts.list_users()})


@memory_app.command("admin")
def memory_admin(
    workspace: Annotated[str, typer.Option(help="The workspace the protected request must be for")],
    config: Annotated[
        Path,
        typer.Option("-c", "--config", help="The protected request (signed JSON); '-' for stdin"),
    ],
) -> None:
    """Execute an administrative operation from a signed protected request (backend use)."""
    from tht.protected import load_key, verify

    key = load_key()
    principal, request, nonce, expires = verify(
        _read_document(str(config)), key, workspace=workspace
    )
    with _services(workspace=workspace) as services:
        services.accounts.use_nonce(nonce, expires)
        emit(services.admin.execute(principal, request))


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port")] = 8765,
    demo: Annotated[
        bool, typer.Option("--demo", help="Load the demo workspace (BIRD Mini-Dev evidence) first")
    ] = False,
    config: Annotated[
        Path | None, typer.Option("-c", "--config", help="YAML with index and embedding sections")
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
    header_timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Seconds a client has to send a request's head; then the connection is closed",
        ),
    ] = 10.0,
    body_timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Seconds a client has to send a request's body; then 408 and the connection is closed",
        ),
    ] = 30.0,
    max_connections: Annotated[
        int,
        typer.Option(
            min=1, help="Open connections (or requests) beyond which new requests get 503"
        ),
    ] = 200,
    max_connections_per_client: Annotated[
        int,
        typer.Option(
            min=1,
            help="Open connections one client address may hold (through a --trusted-proxy:"
            " requests in progress of the client it names); beyond them 429 and closed",
        ),
    ] = 50,
    public_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--public-origin",
            help="scheme://host[:port] the pages are reached at (repeatable); cookie-authenticated "
            "writes must come from one. Default: the served http(s)://host:port",
        ),
    ] = None,
    trusted_proxy: Annotated[
        list[str] | None,
        typer.Option(
            "--trusted-proxy",
            help="Address or network (CIDR) of a reverse proxy whose X-Forwarded-For names the "
            "client (repeatable). Default: none, the TCP peer is the client",
        ),
    ] = None,
) -> None:
    """Run the installation's service: it owns the engines and serves the CLI's socket,
    the administration pages and the HTTP API (the embedded engines, or the configured ones)."""
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


# --- embedded database --------------------------------------------------------------


def _embedded() -> EmbeddedPostgres:
    from tht.bootstrap import embedded_database

    embedded = embedded_database()
    if embedded is None:
        raise InvalidInput(
            "THT_CATALOG_* names an external database: `tht db` manages only the embedded one"
        )
    return embedded


@db_app.command("status")
def db_status() -> None:
    """Where the embedded PostgreSQL lives and whether it is running."""
    emit(_embedded().status())


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded PostgreSQL (the next command starts it again)."""
    emit(_embedded().stop())


# --- demo ---------------------------------------------------------------------------


@app.command("health")
def health() -> None:
    """How the running service (`tht serve`, also with `--no-web`) finds its dependencies:
    the archive, each index and each embedder, with status and latency, as `/healthz`
    answers. Exit 0 when ok or degraded (only an index or an embedder down), 10 when the
    archive is down or no service runs for THT_HOME. It never starts a service."""
    from tht.service import paths
    from tht.service.client import service_health

    home = paths.default_home(os.environ)
    answer = service_health(home)
    if answer is None:
        raise ServiceUnavailable(
            f"no service is running for THT_HOME={home}", details={"home": home}
        )
    http_status, document = answer
    emit(document)
    if http_status != 200:
        raise typer.Exit(ServiceUnavailable.exit_code)


@app.command("demo")
def demo() -> None:
    """Create a demo workspace with a few cards (once) and print them."""
    from tht.demo import DEMO_WORKSPACE, load_demo

    with _services(RuntimeConfig(workspace=DEMO_WORKSPACE)) as services:
        emit(load_demo(services))


# --- entry point --------------------------------------------------------------------


def _configure_logging() -> None:
    level = os.environ.get("THT_LOG_LEVEL")
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, (level or "WARNING").upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if level is None:
        # the pool warns at each failed reconnection while a command waits for PostgreSQL;
        # the command's one JSON error says the outcome (THT_LOG_LEVEL shows them again)
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)


def _names_a_group(command: Any, args: list[str]) -> bool:
    for arg in args:
        commands = getattr(command, "commands", None)
        if arg.startswith("-") or commands is None or arg not in commands:
            return False
        command = commands[arg]
    return hasattr(command, "commands")


_command: Any = None


def main(argv: list[str] | None = None, *, token: str | None = None) -> int:
    """Run one command; ``token`` names its principal (None: the operator)."""
    global _command
    _configure_logging()
    if _command is None:
        _command = typer.main.get_command(app)
    command = _command
    args = sys.argv[1:] if argv is None else argv
    invocation = current()
    invocation = replace(
        invocation,
        token=token if token is not None else invocation.token,
        capability=required(args),
        principal=None,
    )
    try:
        if invocation.token is not None and invocation.capability == OPERATOR_ONLY:
            # closed by default: a token never runs what is not in the capability table
            raise Forbidden(
                f"`tht {' '.join(a for a in args[:2] if not a.startswith('-'))}` is the operator's:"
                " run it where THT_HOME is, without a token"
            )
        # A group without its command: Typer prints the group's help to stdout while
        # raising, and stdout carries only the JSON error, so the help goes to stderr
        # (in the service, where stdout is not the process's, help never arrives).
        grouped = invocation.services is None and _names_a_group(command, args)
        with (
            invoked(invocation),
            audit.scoped(),
            redirect_stdout(sys.stderr) if grouped else nullcontext(),
        ):
            result = command.main(args=args, prog_name="tht", standalone_mode=False)
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
        log.error("unexpected error: %s", exc, exc_info=os.environ.get("THT_DEBUG") == "1")
        error = ThothError(
            f"internal error ({type(exc).__name__}); rerun with THT_DEBUG=1 for details"
        )
    with invoked(invocation):
        emit(error.to_dict())
    return error.exit_code


# the command modules that register themselves on the groups above (imported for that)
import tht.cli.accounts  # noqa: E402  (user grant/revoke/role/token/delete, audit)
import tht.cli.mcp  # noqa: E402  (mcp)
import tht.cli.transfer  # noqa: E402, F401  (memory import, export)

register_workflow(memory_app)  # last, as before: propose, summary, review-apply, solved-index

if __name__ == "__main__":
    raise SystemExit(main())
