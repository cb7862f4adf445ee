# Two commands do all set-up on a fresh machine:
#   make run    creates .venv if missing, installs what running needs, runs the controller in local mode
#   make test   creates .venv, installs test extras, runs lint + types + import contracts + the whole suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
E2E_BUILD := tests/e2e/build-apiserver.sh
# Two targets started at once (make run & make sink) must not build the venv twice: one lock for both.
LOCK := flock $(VENV).lock

# Ports of the local-mode demo (make run / sink / hook); e.g. make run EVENTS_PORT=19090.
EVENTS_PORT ?= 9090
RECEIVER_PORT ?= 9292
METRICS_PORT ?= 8080
HEALTH_PORT ?= 9440
SINK_PORT ?= 9999
HOOK_PORT ?= 9595
UI_PORT ?= 9494

.PHONY: run test check lint types imports unit e2e bench soak crds fmt clean sink hook venv release image

# A release (docs/install.md). The version is written once, in pyproject.toml: VERSION defaults to it and
# scripts/release.py refuses any other. IMG is the image repository without a tag (the tag is VERSION).
VERSION ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMG ?= ghcr.io/example/notification-controller

# What running needs: the package and its runtime dependencies (no test toolchain).
$(RUN_STAMP): pyproject.toml
	@$(LOCK) sh -c 'test -f $(RUN_STAMP) -a $(RUN_STAMP) -nt pyproject.toml && exit 0; \
		test -x $(PY) || $(PYTHON) -m venv $(VENV); \
		$(PY) -m pip install --quiet --upgrade pip && \
		$(PY) -m pip install --quiet -e ".[speed]" && touch $(RUN_STAMP)'

# Everything the checks need on top.
$(STAMP): $(RUN_STAMP)
	@$(LOCK) sh -c 'test -f $(STAMP) -a $(STAMP) -nt $(RUN_STAMP) && exit 0; \
		$(PY) -m pip install --quiet -e ".[test,speed]" && touch $(STAMP)'

venv: $(STAMP)

MANIFESTS ?= examples/manifests

run: $(RUN_STAMP)
	$(PY) -m notification_controller --manifests $(MANIFESTS) --log-encoding console \
		--events-addr 127.0.0.1:$(EVENTS_PORT) --receiverAddr 127.0.0.1:$(RECEIVER_PORT) \
		--metrics-addr 127.0.0.1:$(METRICS_PORT) --health-addr 127.0.0.1:$(HEALTH_PORT) \
		--ui-addr 127.0.0.1:$(UI_PORT)

sink: $(RUN_STAMP)
	$(PY) examples/sink.py $(SINK_PORT)

# The example pre-dispatch hook (docs/hooks.md) on 127.0.0.1:$(HOOK_PORT); HOOK_ARGS=--always-open for demos.
hook: $(RUN_STAMP)
	HOOK_HMAC_KEY=change-me-hook-key $(PY) examples/hooks/enricher.py --port $(HOOK_PORT) $(HOOK_ARGS)

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

# wrk (the C load generator) and Go (builds the Go peer, bench/gopeer) come from bench/deps.sh; e.g.
# make bench BENCH_ARGS="--only ingest --quick", or BENCH_ARGS="--repeat 3 --markdown" for the README table.
bench: $(STAMP)
	bash bench/deps.sh
	$(PY) -m bench $(BENCH_ARGS)

soak: $(STAMP) e2e-server
	$(VENV)/bin/pytest -p no:cacheprovider -m soak

crds: $(STAMP)
	$(PY) -m notification_controller.api.crdgen config/crd/bases/

# dist/install.yaml (plain cluster) and dist/flux-system/notification-controller/ (a `flux bootstrap` cluster).
release: $(RUN_STAMP)
	$(PY) scripts/release.py --version $(VERSION) --image $(IMG) --out dist

# The image of that release (the OCI version label from the same VERSION); push it where IMG says.
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMG):$(VERSION) .

clean:
	rm -rf $(VENV) $(VENV).lock build *.egg-info .mypy_cache .ruff_cache
