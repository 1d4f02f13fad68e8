"""Scanning a DWH schema through SQLAlchemy's inspector (PostgreSQL, SQLite, and any
dialect SQLAlchemy supports). Every failure is a DwhUnavailable: a failed or partial
scan never proves that anything was removed."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tht.catalog.model import Binding, Tables
from tht.errors import ConfigurationError, DwhUnavailable
from tht.installation import DwhConnection

log = logging.getLogger(__name__)


def _dwh_error_line(exc: BaseException) -> str:
    # SQLAlchemy wraps the driver's error: its own message is the useful one
    text = str(getattr(exc, "orig", None) or exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:500]


def dwh_url(connection: DwhConnection, env: Mapping[str, str]) -> str:
    url = env.get(connection.url_env)
    if not url:
        # the installation's fault, not the request's: the scan fails and proves nothing
        raise DwhUnavailable(
            f"the environment variable {connection.url_env} (the DWH's SQLAlchemy URL) is not"
            " set in the service's environment",
            details={"url_env": connection.url_env},
        )
    return url


def scan(binding: Binding, connection: DwhConnection, env: Mapping[str, str]) -> Tables:
    """Every table and view of the bound schema with its columns, through the
    installation's DWH connection the binding names."""
    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import make_url
    from sqlalchemy.engine.reflection import ObjectKind

    raw = dwh_url(connection, env)
    try:
        url = make_url(raw)
    except sa_exc.ArgumentError as exc:
        raise ConfigurationError(
            f"{connection.url_env} does not hold a valid SQLAlchemy URL"
        ) from exc
    where = {
        "database": binding.database,
        "schema": binding.schema,
        "connection": binding.connection,
        "dialect": url.get_backend_name(),
    }
    kwargs: dict[str, Any] = {}
    if url.get_backend_name() == "sqlite":
        path = url.database
        if not path or path == ":memory:":
            raise ConfigurationError(f"{connection.url_env}: a SQLite DWH must be a file")
        if not Path(path).is_file():
            raise DwhUnavailable(f"the SQLite DWH file {path} does not exist", details=where)
        # read-only: scanning must never create or change the DWH
        kwargs["creator"] = lambda: sqlite3.connect(
            f"file:{Path(path).resolve()}?mode=ro", uri=True
        )
    elif url.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": max(1, int(connection.timeout))}
    try:
        engine = create_engine(url, **kwargs)
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError, ImportError) as exc:
        raise ConfigurationError(
            f"{connection.url_env}: unsupported DWH URL ({_dwh_error_line(exc)})"
        ) from exc
    try:
        with engine.connect() as conn:
            inspector = inspect(conn)
            if not inspector.has_schema(binding.schema):
                raise DwhUnavailable(
                    f"schema '{binding.schema}' does not exist in the DWH (or this login cannot see it):"
                    " a missing schema proves no removal",
                    details=where,
                )
            if url.get_backend_name() == "postgresql":
                usable = conn.execute(
                    text("SELECT has_schema_privilege(:s, 'USAGE')"), {"s": binding.schema}
                ).scalar()
                if not usable:
                    raise DwhUnavailable(
                        f"permission denied: the DWH login has no USAGE on schema"
                        f" '{binding.schema}'",
                        details=where,
                    )
            names = inspector.get_table_names(schema=binding.schema) + inspector.get_view_names(
                schema=binding.schema
            )
            tables: Tables = {name: [] for name in names}
            # one query for every table and view (not one per table)
            multi = inspector.get_multi_columns(schema=binding.schema, kind=ObjectKind.ANY)
            for (_, table), columns in multi.items():
                if table in tables:
                    tables[table] = [c["name"] for c in columns]
    except DwhUnavailable:
        raise
    except sa_exc.SQLAlchemyError as exc:
        raise DwhUnavailable(
            f"the DWH could not be scanned: {_dwh_error_line(exc)}", details=where
        ) from exc
    except sqlite3.Error as exc:
        raise DwhUnavailable(
            f"the DWH could not be scanned: {_dwh_error_line(exc)}", details=where
        ) from exc
    finally:
        engine.dispose()
    return {name: sorted(cols) for name, cols in sorted(tables.items())}
