# The reference environment for harness/references/tl_lens.py: TransformerLens 4.3.0 in its own
# virtual environment, .venv/ref (inside .venv: `make clean` removes it), so the main
# environment stays lean. Include this file from the
# Makefile (`include harness/references/ref-env.mk`) or run it alone from the repository root:
#   make -f harness/references/ref-env.mk ref-env
#
# The stamp .venv/ref/.installed depends on the pinned list harness/references/requirements.txt;
# when the list changes the environment is made again from scratch (about 30 s here with uv's
# cache warm, 40-47 s cold; 50 s with plain pip), so it always holds exactly the list. Nothing is
# resolved: pip installs the pinned uv, then `uv pip install --no-deps -r` installs the
# frozen, fully pinned list. Before installing, a dry run checks that torch 2.13.0 comes as
# the local CPU wheel (2.13.0+cpu, from REF_FIND_LINKS); where it would not, any torch is a
# multi-GB CUDA download and the target stops instead. Then `tl_lens.py --warm-up` imports what
# a run imports with bytecode writing on: this machine sets PYTHONDONTWRITEBYTECODE=1, and
# without those .pyc files every run would take about 5 s more (compiling the whole
# environment instead, as `uv pip install --compile-bytecode` does, costs 10 s more here).
# The venv gets its own .gitignore ('*'), so git ignores it.

REF_PYTHON ?= python3
REF_VENV := .venv/ref
REF_STAMP := $(REF_VENV)/.installed
REF_REQS := harness/references/requirements.txt
# Where pip finds the local torch CPU wheel (pip reads it from its config; uv is told).
REF_FIND_LINKS ?= /opt/wheels
REF_UV_OPTS := --python $(REF_VENV)/bin/python \
	$(if $(wildcard $(REF_FIND_LINKS)),--find-links $(REF_FIND_LINKS))

# Keep the including Makefile's default goal: this file's targets never become the default.
_ref_env_saved_goal := $(.DEFAULT_GOAL)

.PHONY: ref-env ref-env-clean

ref-env: $(REF_STAMP)

$(REF_STAMP): $(REF_REQS)
	rm -rf $(REF_VENV)
	$(REF_PYTHON) -m venv $(REF_VENV)
	printf '*\n' > $(REF_VENV)/.gitignore
	$(REF_VENV)/bin/python -m pip install -qq --disable-pip-version-check "$$(grep '^uv==' $(REF_REQS))"
	$(REF_VENV)/bin/uv pip install $(REF_UV_OPTS) --dry-run --no-deps "$$(grep '^torch==' $(REF_REQS))" 2>&1 \
	  | grep -q -F '+ torch==2.13.0+cpu' || { echo "ref-env: torch 2.13.0 would not come as the \
	local CPU wheel 2.13.0+cpu (no $(REF_FIND_LINKS)?): any other torch is a multi-GB CUDA \
	download, so stopping"; exit 1; }
	$(REF_VENV)/bin/uv pip install $(REF_UV_OPTS) --quiet --no-deps -r $(REF_REQS)
	env -u PYTHONDONTWRITEBYTECODE $(REF_VENV)/bin/python harness/references/tl_lens.py --warm-up
	$(REF_VENV)/bin/python -m pip check --disable-pip-version-check
	$(REF_VENV)/bin/python -c 'import torch; assert torch.__version__ == "2.13.0+cpu", torch.__version__'
	touch $@

ref-env-clean:
	rm -rf $(REF_VENV)

.DEFAULT_GOAL := $(_ref_env_saved_goal)
