# Two entry points: `make demo` runs the main demo, `make test` runs the tests.
# Both install everything they need into .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

FLINK_VENV ?= .venv-flink

.PHONY: install kafka flink demo roundtrip test lint
install: $(VENV)/.installed

# Apache Kafka's jars from Maven Central (kafka_2.13 plus a log4j2 binding), into a cache
# folder outside the checkout; `jobledger broker` runs them as a single-node KRaft broker.
kafka: install
	$(BIN)/jobledger broker --kafka --install

# Apache Flink's own jars (from the apache-flink wheel), in a virtualenv of their own since
# its pins clash with PySpark's; tests compare jobledger with Flink through them.
flink: $(FLINK_VENV)/.installed

$(FLINK_VENV)/.installed:
	$(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/python -m pip install --quiet apache-flink
	touch $@

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,embedded,containers,spark]'
	touch $@

demo: kafka
	$(BIN)/jobledger demo wordcount examples/words.txt

roundtrip: install
	JOBLEDGER=$(BIN)/jobledger bash examples/roundtrip.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint kafka flink
	$(BIN)/jobledger schemas write --check
	$(BIN)/pytest
