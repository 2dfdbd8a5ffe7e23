# GuideLoom's entry points. `make test` is what the README and CI (.ci/run) run.
#
#   make venv    .venv with everything (one pip command, torch pinned); re-runs are instant
#   make test    venv + Debian's S3 (radosgw) and chromium when missing (best effort) + pytest
#   make demo    python -m guideloom.demo
#   make bench   python -m benchmarks
#   make bench-peers  python -m benchmarks.peers: LitData and Guide Labs' GuideLoom 1.1 on the same
#                corpus, then python -m benchmarks.ingest_peers: guideloom ingest beside datatrove's
#                tokenization (optional, not in CI; builds their venvs once under $GUIDELOOM_PEERS_ENV,
#                default ~/.cache/guideloom-peers; PEERS_ARGS passes options to the first)
#   make docs    mkdocs build --strict
#   make lint    ruff + mypy on guideloom
#
# PYTEST_ARGS passes options to pytest: make test PYTEST_ARGS="tests/infra -x"
# TEST_WORKERS sets the parallel test processes (pytest-xdist; 0 runs in one process). The suite
# mostly waits on servers, Ray and subprocesses, so more processes than cores pays: see
# CONTRIBUTING.md "The test suite". One S3 endpoint serves them all; Ray and browser tests each
# stay in one process (tests/conftest.py). The 15 slowest tests are printed at the end.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# Re-install when pyproject.toml changes.
STAMP := $(VENV)/.guideloom-installed
# `venv --upgrade-deps` first brings pip up to date: the pip bundled with Python 3.11 (23.x)
# backtracks through dozens of boto3/aiobotocore/s3fs versions and ends up swapping the local
# torch+cpu wheel for PyPI's CUDA build (5.8 GB venv, 13 min); a current pip resolves in about 1 min.
# torch is pinned here, not in pyproject.toml (whose ranges stay broad): without the pin pip
# picks a CUDA build plus GBs of nvidia wheels. Everything goes in ONE pip command: installing
# piecemeal lets moto[server] upgrade botocore past aiobotocore's pin. constraints.txt holds
# versions known to work together, so pip does not backtrack through dozens of releases.
TORCH_PIN := torch==2.13.0
PYTEST_ARGS ?=
TEST_WORKERS ?= 4
PEERS_ARGS ?=
LINT_PATHS ?= guideloom workers benchmarks
APT_GET := DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: venv test demo bench bench-peers docs lint system-packages system-packages-apt azurite

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@if [ ! -x "$(PY)" ]; then \
	    if ! "$(PYTHON)" -m venv --upgrade-deps "$(VENV)" 2>/dev/null; then \
	        echo "make venv: '$(PYTHON) -m venv' failed (Debian ships venv separately); installing python3-venv"; \
	        rm -rf "$(VENV)"; \
	        $(APT_GET) update -qq && $(APT_GET) install -y -qq python3-venv \
	            "$$(basename "$$(readlink -f "$(PYTHON)")")-venv" || $(APT_GET) install -y -qq python3-venv; \
	        "$(PYTHON)" -m venv --upgrade-deps "$(VENV)"; \
	    fi; \
	fi
	$(PY) -m pip install --disable-pip-version-check -c constraints.txt $(TORCH_PIN) -e ".[dev]"
	$(PY) -m pip check
	touch $(STAMP)

# Best effort: without radosgw the tests use moto's server; without chromium browser tests skip;
# without Node (20+) and azurite the Azure tests skip (GCS's emulator comes with .[dev]).
AZURITE_CACHE ?= $(HOME)/.cache/guideloom-azurite
system-packages: system-packages-apt azurite
	@true

azurite:
	@if [ -x "$(AZURITE_CACHE)/node_modules/.bin/azurite-blob" ] || command -v azurite-blob >/dev/null; then exit 0; fi; \
	if ! command -v npm >/dev/null; then \
	    echo "make: not installing azurite (no npm; needs Node 20+); the Azure tests will skip"; exit 0; \
	fi; \
	npm install --prefix "$(AZURITE_CACHE)" --no-audit --no-fund --silent azurite@3.35.0 \
	    || echo "make: could not install azurite; the Azure tests will skip"

system-packages-apt:
	@missing=""; \
	command -v radosgw >/dev/null && command -v ceph-mon >/dev/null && command -v ceph-osd >/dev/null \
	    || missing="$$missing s3"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "make: not installing$$missing (needs root and apt-get); tests fall back to moto / skip browser tests"; \
	    exit 0; \
	fi; \
	$(APT_GET) update -qq || echo "make: apt-get update failed; trying the install anyway"; \
	case "$$missing" in *s3*) \
	    { $(APT_GET) install -y -qq radosgw \
	      && $(APT_GET) install -y -qq --no-install-recommends ceph-mon ceph-osd; } \
	    || echo "make: could not install radosgw/ceph; the tests fall back to moto's S3 server";; \
	esac; \
	case "$$missing" in *chromium*) \
	    $(APT_GET) install -y -qq chromium \
	    || echo "make: could not install chromium; browser tests will not run";; \
	esac

test: venv system-packages
	@rc=0; $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=15 $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc = 5 ]; then echo "make test: pytest collected no tests (exit 5): that is a failure" >&2; fi; \
	exit $$rc

demo: venv
	$(PY) -m guideloom.demo

bench: venv
	$(PY) -m benchmarks

bench-peers: venv
	$(PY) -m benchmarks.peers $(PEERS_ARGS)
	$(PY) -m benchmarks.ingest_peers

docs: venv
	# Material 9.7+ prints a notice about MkDocs 2.0 on every build; the variable silences it.
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: venv
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy $(LINT_PATHS)
