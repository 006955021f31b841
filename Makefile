# Two entry points: `make demo` runs the main demo, `make test` runs the tests.
# Both install everything they need into .venv first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

FLINK_VENV ?= .venv-flink

# Apicurio Registry (Confluent-compatible API under /apis/ccompat/v7) from Maven Central: the
# real schema registry the Confluent wire-format tests run against. 3.0.9 runs on Java 17.
APICURIO_VERSION := 3.0.9
APICURIO_HOME ?= $(HOME)/.cache/jobledger/apicurio-registry-$(APICURIO_VERSION)

# Go for the Go client's test (examples/go): the Go on PATH, else the official tarball's place.
GO ?= $(shell command -v go || echo /usr/local/go/bin/go)

.PHONY: install kafka flink registry browser goclient demo roundtrip test lint docs
install: $(VENV)/.installed

# Apache Kafka's jars from Maven Central (kafka_2.13 plus a log4j2 binding), into a cache
# folder outside the checkout; `jobledger broker` runs them as a single-node KRaft broker.
kafka: install
	$(BIN)/jobledger broker --install

# Apache Flink's own jars (from the apache-flink wheel), in a virtualenv of their own since
# its pins clash with PySpark's; tests compare jobledger with Flink through them.
flink: $(FLINK_VENV)/.installed

registry: $(APICURIO_HOME)/.installed

# Debian's Chromium, which the dashboard's browser test drives through Playwright (CI runs
# as root; elsewhere this says what to run).
browser:
	@command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; } || \
		{ echo "run: sudo apt-get install chromium" >&2; exit 1; }

# The Go client of examples/go, its modules (go.sum) from the Go module proxy.
goclient:
	cd examples/go && $(GO) build -o goclient .

$(APICURIO_HOME)/.installed:
	mkdir -p $(APICURIO_HOME)
	mvn -q -B -Dstyle.color=never dependency:copy \
		-Dartifact=io.apicurio:apicurio-registry-app:$(APICURIO_VERSION):tar.gz:all \
		-DoutputDirectory=$(APICURIO_HOME)
	tar -xzf $(APICURIO_HOME)/apicurio-registry-app-$(APICURIO_VERSION)-all.tar.gz -C $(APICURIO_HOME)
	rm $(APICURIO_HOME)/apicurio-registry-app-$(APICURIO_VERSION)-all.tar.gz
	touch $@

$(FLINK_VENV)/.installed:
	$(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/python -m pip install --quiet apache-flink
	touch $@

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,containers,spark,plot,ui,bench]'
	touch $@

demo: kafka
	$(BIN)/jobledger demo wordcount examples/words.txt

roundtrip: install
	JOBLEDGER=$(BIN)/jobledger bash examples/roundtrip.sh

# The docs site (mkdocs.yml), built strictly: a broken link, a page missing from the nav or a
# generated reference page that fails to build fails the target.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir "$$(mktemp -d)"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint kafka flink registry browser goclient docs
	$(BIN)/jobledger schemas write --check
	$(BIN)/pytest
