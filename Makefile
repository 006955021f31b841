# Two entry points: `make demo` runs the main demo, `make test` runs the tests.
# Both install everything they need into .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test lint
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,embedded,containers]'
	touch $@

demo: install
	JOBLEDGER=$(BIN)/jobledger bash examples/roundtrip.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/jobledger schemas write --check
	$(BIN)/pytest
