"""The product against a PostgreSQL server as production runs one (scripts/real_postgres.py):
TCP, scram-sha-256 passwords, TLS only, logins and passwords named by THT_CATALOG_*
variables and files. `make test-real-postgres` starts the server, runs this module and the
archive's own suites against it, and stops it.

Each test works in a database of its own, made by the server's superuser and owned by
the migrator login, exactly as a DBA would hand one over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.factories import card_document, write_installation


@pytest.fixture
def handed_over(tmp_path):
    """A fresh database owned by the migrator, and the environment a `tht` process gets."""
    name = f"real_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(os.environ["THT_TEST_ADMIN_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(os.environ["THT_CATALOG_MIGRATOR_USER"])
            )
        )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("THT_") or k.startswith("THT_CATALOG_")
    }
    env |= {"THT_CATALOG_DB_NAME": name, "THT_HOME": str(tmp_path / "home"), "THT_SERVICE": "off"}
    yield env
    with psycopg.connect(os.environ["THT_TEST_ADMIN_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def tht(env: dict[str, str], *args: str) -> tuple[int, dict, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tht", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), time.monotonic() - started


def test_migrate_write_and_recall_over_tls_with_password_files(handed_over, tmp_path):
    assert handed_over["THT_CATALOG_DB_SSLMODE"] == "verify-full"
    code, report, _ = tht(handed_over, "memory", "migrate")
    assert code == 0, report
    assert report["database"] == "external"
    assert report["runtime_login"] == handed_over["THT_CATALOG_RUNTIME_USER"]
    assert tht(handed_over, "workspace", "create", "acme", "--language", "en")[0] == 0

    write_installation(tmp_path / "home")  # the tests' embedder: the installation's
    config = tmp_path / "runtime.yaml"
    config.write_text("workspace: acme\ndatabase: dwh\nschema: sales\n")
    card = tmp_path / "card.json"
    card.write_text(json.dumps(card_document()))
    code, created, _ = tht(handed_over, "memory", "create", "-c", str(config), "--data", str(card))
    assert code == 0, created
    code, found, _ = tht(
        handed_over, "memory", "search", card_document()["title"], "-c", str(config)
    )
    assert code == 0, found
    assert [r["id"] for r in found["results"]][:1] == [created["card"]["id"]]

    # the runtime login really is the restricted one, and its session really is encrypted
    runtime = psycopg.conninfo.make_conninfo(
        host=handed_over["THT_CATALOG_DB_HOST"],
        port=handed_over["THT_CATALOG_DB_PORT"],
        dbname=handed_over["THT_CATALOG_DB_NAME"],
        user=handed_over["THT_CATALOG_RUNTIME_USER"],
        password=Path(handed_over["THT_CATALOG_RUNTIME_PASSWORD_FILE"]).read_text().strip(),
        sslmode="verify-full",
        sslrootcert=handed_over["THT_CATALOG_DB_SSLROOTCERT"],
    )
    with psycopg.connect(runtime) as conn:
        superuser, ssl = conn.execute(
            "SELECT r.rolsuper, s.ssl FROM pg_roles r, pg_stat_ssl s"
            " WHERE r.rolname = current_user AND s.pid = pg_backend_pid()"
        ).fetchone()
    assert (superuser, ssl) == (False, True)


@pytest.mark.parametrize(
    ("change", "login", "reason"),
    [
        ({"THT_CATALOG_RUNTIME_PASSWORD_FILE": "wrong"}, "RUNTIME", "the password was refused"),
        ({"THT_CATALOG_MIGRATOR_PASSWORD_FILE": "wrong"}, "MIGRATOR", "the password was refused"),
        ({"THT_CATALOG_DB_SSLROOTCERT": "other-ca"}, "RUNTIME", "did not verify"),
        ({"THT_CATALOG_DB_SSLMODE": "disable"}, "RUNTIME", "pg_hba.conf rejects"),
    ],
    ids=["runtime-password", "migrator-password", "untrusted-certificate", "no-tls"],
)
def test_a_refused_login_is_a_configuration_error_said_at_once(
    handed_over, tmp_path, change, login, reason
):
    assert tht(handed_over, "memory", "migrate")[0] == 0
    env = dict(handed_over)
    for key, value in change.items():
        if value == "wrong":
            (tmp_path / "wrong").write_text("not-the-password\n")
            value = str(tmp_path / "wrong")
        elif value == "other-ca":
            value = str(_other_certificate(tmp_path))
        env[key] = value
    args = ("memory", "migrate") if login == "MIGRATOR" else ("workspace", "list")
    code, document, seconds = tht(env, *args)
    error = document["error"]
    assert (code, error["code"]) == (2, "archive_login_refused"), document
    assert reason in error["message"]
    assert error["details"]["user"] == handed_over[f"THT_CATALOG_{login}_USER"]
    assert "not-the-password" not in json.dumps(document)
    # said at once: not after the pool's 10 s wait for a server that will not change its mind
    assert seconds < 8, seconds


def test_an_unreachable_server_is_an_outage_not_a_configuration_error(handed_over):
    env = dict(handed_over, THT_CATALOG_DB_PORT="1")
    code, document, _ = tht(env, "workspace", "list")
    assert (code, document["error"]["code"]) == (6, "archive_unavailable")


def _other_certificate(tmp_path: Path) -> Path:
    out = tmp_path / "other-ca.crt"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-keyout", str(tmp_path / "other.key"), "-out", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    return out
