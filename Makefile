# Two commands do all set-up on a fresh machine:
#   make run    creates .venv if missing, installs, runs the controller in local mode on examples/
#   make test   creates .venv, installs test extras, runs lint + types + import contracts + the whole suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
E2E_BUILD := tests/e2e/build-apiserver.sh

.PHONY: run test check lint types imports unit e2e bench soak crds fmt clean sink hook

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,speed]'
	@touch $(STAMP)

venv: $(STAMP)

MANIFESTS ?= examples/manifests

run: $(STAMP)
	$(PY) -m notification_controller --manifests $(MANIFESTS) --log-encoding console \
		--events-addr 127.0.0.1:9090 --receiverAddr 127.0.0.1:9292 \
		--metrics-addr 127.0.0.1:8080 --health-addr 127.0.0.1:9440

sink: $(STAMP)
	$(PY) examples/sink.py

# The example pre-dispatch hook (docs/hooks.md) on 127.0.0.1:9595; HOOK_ARGS=--always-open for demos.
hook: $(STAMP)
	HOOK_HMAC_KEY=change-me-hook-key $(PY) examples/hooks/enricher.py $(HOOK_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fmt: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

types: $(STAMP)
	$(VENV)/bin/mypy notification_controller tests bench examples

imports: $(STAMP)
	$(VENV)/bin/lint-imports

e2e-server:
	bash $(E2E_BUILD)

system-deps:
	bash scripts/system-deps.sh

# The whole suite, e2e included (the real kube-apiserver is built once and cached in ~/.cache).
test: $(STAMP) lint types imports system-deps e2e-server
	$(VENV)/bin/pytest -p no:cacheprovider

check: test

unit: $(STAMP) system-deps
	$(VENV)/bin/pytest -p no:cacheprovider -m "not e2e"

e2e: $(STAMP) e2e-server
	$(VENV)/bin/pytest -p no:cacheprovider -m e2e

bench: $(STAMP)
	$(PY) -m bench

soak: $(STAMP) e2e-server
	$(VENV)/bin/pytest -p no:cacheprovider -m soak

crds: $(STAMP)
	$(PY) -m notification_controller.api.crdgen crds/

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
