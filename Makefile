# Two commands on a fresh machine:
#   make up     set everything up, ingest the example library, serve the Dagster UI + MCP
#   make test   install what the tests need (Python deps, Tesseract) and run them
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: up test install system-deps

# torch first, pinned: 2.13.0 is the CPU build this machine kind keeps on local
# disk; a bare `torch` requirement (sentence-transformers has one) pulls a
# multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
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
	@# the UI browser test drives Debian's Chromium (playwright downloads no browser of its own)
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "installing Chromium + ChromeDriver from Debian packages (UI browser test)"; \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium chromium-driver; \
	fi

install: system-deps $(VENV)/.installed

test: install
	$(BIN)/pytest

up: install
	$(BIN)/library up
