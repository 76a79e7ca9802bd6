# Quick start: `make demo` runs the nightly CRM-to-List sync against the local emulator;
# `make test` runs ruff, mypy and the test suite; `make cluster` starts a local Airflow cluster
# (CeleryExecutor) with the example DAGs. All set up .venv on first use, pinned by the
# constraints file of the Python version (deploy/constraints-3.11.txt: what it is is said at its
# top); a Python without one installs unpinned, with a warning.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
CONSTRAINTS := $(wildcard deploy/constraints-$(PYTHON_VERSION).txt)

.PHONY: test lint typecheck unit venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(CONSTRAINTS),,@echo "warning: no deploy/constraints-$(PYTHON_VERSION).txt; installing without pins")
	$(BIN)/python -m pip install --quiet $(if $(CONSTRAINTS),--constraint $(CONSTRAINTS)) -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

test: lint typecheck unit

# The benchmarks' optional dependencies (the people planning's DuckDB baseline), into .venv.
.PHONY: bench
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet $(if $(CONSTRAINTS),--constraint $(CONSTRAINTS)) -e '.[bench]'

# The nightly CRM-to-List DAG, three nights in a row against a local emulator (examples/demo.py).
.PHONY: demo
demo: $(STAMP)
	$(BIN)/python examples/demo.py

# A native Airflow cluster with the compose stack's settings (deploy/airflow.env): PostgreSQL
# metadata database, Redis broker, api-server, scheduler, dag-processor, triggerer, a Celery
# worker, the emulator and the example warehouse. Needs PostgreSQL on 127.0.0.1:5432 (a user that
# may create databases; LISTSYNC_CLUSTER_POSTGRES_URL) and Redis on 127.0.0.1:6379
# (LISTSYNC_CLUSTER_REDIS_URL). It keeps running until `make cluster-stop`; logs in .cluster/logs.
.PHONY: cluster cluster-stop
cluster: $(STAMP)
	$(BIN)/python deploy/cluster.py start

cluster-stop: $(STAMP)
	$(BIN)/python deploy/cluster.py stop

# Regenerate deploy/constraints-<python version>.txt: pip's resolution of the package with every
# extra, celery held below 5.7 (5.7.0 breaks the Celery provider). Review the diff, then run
# `make test` on a fresh venv.
# mysqlclient builds from source: its flags let pip read its metadata without the MySQL headers.
.PHONY: constraints
constraints: $(STAMP)
	MYSQLCLIENT_CFLAGS=-I/usr/include/mysql MYSQLCLIENT_LDFLAGS=-lmysqlclient \
	  $(BIN)/python -m pip install --quiet --dry-run --ignore-installed --report $(VENV)/resolution.json \
	  "kombu<5.7" '.[test,postgres,mysql,snowflake,bigquery]'
	$(BIN)/python deploy/constraints.py $(VENV)/resolution.json deploy/constraints-$(PYTHON_VERSION).txt

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
