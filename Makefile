# sendlater: `make run` serves the demo on SQLite with two pollers, `make test` runs the suite
# (with the quick fault subset on PostgreSQL), `make faults` every fault scenario.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
HOST ?= 127.0.0.1
PORT ?= 8000

# Django 6.1 needs Python 3.12 or newer: take the first interpreter that is.
PYTHON ?= $(shell for p in python3.13 python3.12 python3 $$HOME/.pyenv/versions/3.1[2-9]*/bin/python3; do \
	  if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then \
	    command -v $$p; break; fi; done)

.PHONY: venv run serve test faults lint format migrate admin api-key clean

$(BIN)/.installed: requirements.txt clients/python/pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "error: Python 3.12 or newer is required (Django 6.1); none found on PATH" >&2; exit 1; fi
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/pip install --quiet --disable-pip-version-check -e ./clients/python
	@touch $@

venv: $(BIN)/.installed

migrate: venv
	$(PY) manage.py migrate --noinput

admin: migrate
	$(PY) manage.py ensure_admin

# An API key for team $(TEAM) (created if needed) on the demo database.
api-key: export DEBUG ?= true
api-key: migrate
	@$(PY) manage.py create_api_key --team $(or $(TEAM),demo)

DEMO_PORT ?= 8001

run: export DEBUG ?= true
run: export SENDLATER_CALLBACK_ALLOWLIST ?= 127.0.0.1
run: admin
	$(PY) manage.py collectstatic --noinput -v 0
	$(PY) manage.py seed_demo --receiver http://127.0.0.1:$(DEMO_PORT)/hooks/demo
	@echo "sendlater on http://$(HOST):$(PORT)/  (admin at http://$(HOST):$(PORT)/admin/), 2 pollers,"
	@echo "demo receiver on 127.0.0.1:$(DEMO_PORT) (deliveries are logged below within a minute); Ctrl-C stops all"
	$(PY) manage.py runservice --bind $(HOST):$(PORT) --workers 2 --pollers 2 --demo-receiver $(DEMO_PORT)

test: export SECRET_KEY ?= test-only-not-a-secret
test: export SECURE_SSL_REDIRECT ?= false
# Tests (and the pollers they start) keep partitions a couple of days ahead, not the horizon:
# for speed only. A poller no longer stalls on a fresh database (it creates a few partitions
# per iteration), but in a test whose transaction is rolled back every poller iteration would
# spend its partition budget again on partitions that vanish with the test
# (tests/integration/test_poller_loop.py: 13 s instead of 5 s on PostgreSQL).
test: export SENDLATER_PARTITION_AHEAD_DAYS ?= 2
# The client kit's Django receiver app (clients/python), for its tests (tests/clients/).
test: export SENDLATER_EXTRA_APPS ?= sendlater_client.django
test: venv
	$(BIN)/pytest $(PYTEST_ARGS)

# Every fault scenario (docs/reliability.md), up to ~20 minutes, PostgreSQL only. It
# restarts the PostgreSQL cluster once (pg_ctlcluster ... restart -m immediate):
# SENDLATER_FAULTS_PG_RESTART=0 leaves that scenario out on a shared server.
faults: export SECRET_KEY ?= test-only-not-a-secret
faults: export SECURE_SSL_REDIRECT ?= false
faults: export SENDLATER_FAULTS_FULL = 1
faults: export SENDLATER_FAULTS_STRICT_LAG ?= 1
faults: export SENDLATER_FAULTS_PG_RESTART ?= 1
faults: venv
	@case "$$DATABASE_URL" in postgres*) ;; \
	  *) echo "error: make faults needs DATABASE_URL=postgres://... (PostgreSQL)" >&2; exit 2;; esac
	$(BIN)/pytest tests/faults -m faults $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) staticfiles db.sqlite3 db.sqlite3-* test_db.sqlite3*
