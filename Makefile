# Two commands on a fresh machine:
#   make up     set everything up, ingest the example library, serve the Dagster UI + MCP
#   make test   install what the tests need (Python deps, Tesseract) and run them
# and, while working on the code:
#   make test-fast  the fast tier alone (library_pipeline_tests/unit): no PostgreSQL,
#                   no model, no Dagster instance (136 tests, 18 s on 2 busy cores)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: up test test-fast test-external install system-deps services-up services-down services-status
SERVICES := $(BIN)/python scripts/services.py

# torch first, pinned: 2.13.0 is the CPU build this machine kind keeps on local
# disk; a bare `torch` requirement (sentence-transformers has one) pulls a
# multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[all,test]'
	touch $@

system-deps:
	@if ! command -v tesseract >/dev/null || ! tesseract --list-langs 2>/dev/null | grep -qx rus; then \
		echo "installing Tesseract OCR (eng+rus) from Debian packages"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq tesseract-ocr tesseract-ocr-eng tesseract-ocr-rus; \
	fi
	@# vault sync reads the vault's git repository with the git CLI
	@if ! command -v git >/dev/null; then \
		echo "installing git from Debian packages (vault sync)"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq git; \
	fi
	@# the external-backend tests: Redis is the celery executor's broker (scripts/services.py)
	@if ! command -v redis-server >/dev/null; then \
		echo "installing Redis from Debian packages (celery broker for the external-backend tests)"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server; \
	fi
	@# the UI browser test drives Debian's Chromium (playwright downloads no browser of its own)
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "installing Chromium + ChromeDriver from Debian packages (UI browser test)"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium chromium-driver; \
	fi

install: system-deps $(VENV)/.installed

# The whole suite on the embedded server, then the database-facing subset (`db`)
# and the tests that need real services (`external`: celery workers + Redis, several
# MCP servers on one database) against a standalone PostgreSQL over TCP. The
# services are stopped whatever the outcome; the exit status is the first failure.
test: install
	@status=0; \
	$(BIN)/pytest || status=$$?; \
	$(MAKE) --no-print-directory test-external || status=$$?; \
	exit $$status

# The fast tier: the Python environment only (no Debian packages, no services).
# `make test` runs these tests too, with everything else.
test-fast: $(VENV)/.installed
	$(BIN)/pytest library_pipeline_tests/unit

test-external: install
	$(SERVICES) up
	@echo "=== database backend: external PostgreSQL over TCP (pytest -m 'db or external') ==="
	@status=0; \
	eval "$$($(SERVICES) env)" && $(BIN)/pytest -m "db or external" || status=$$?; \
	$(SERVICES) drop-test-databases; \
	$(SERVICES) down; \
	exit $$status

# a standalone PostgreSQL 18 + pgvector (127.0.0.1, password role) and Redis, each
# with its own data under $${LIBRARY_SERVICES_HOME:-.services}; `eval "$$(.venv/bin/python
# scripts/services.py env)"` exports LIBRARY_DB_DSN / LIBRARY_DAGSTER_DSN for them
services-up: install
	$(SERVICES) up

services-down:
	$(SERVICES) down

services-status:
	$(SERVICES) status

up: install
	$(BIN)/library up
