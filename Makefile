# Thin wrappers over the `course` command. `make run` and `make test` set everything up themselves
# on a machine that has only Python 3.11+ and pip: a .venv from the pinned constraints, the course
# package in editable mode, and the Jupyter kernel registered inside the venv.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= results
PROFILE ?= auto
SUBMISSIONS ?= submissions
GRADES ?= autograde/workspace

# Keep Jupyter, IPython, matplotlib, torch and Hugging Face caches out of the user's home.
STATE := $(CURDIR)/.state
export JUPYTER_CONFIG_DIR  := $(STATE)/jupyter/config
export JUPYTER_DATA_DIR    := $(STATE)/jupyter/data
export JUPYTER_RUNTIME_DIR := $(STATE)/jupyter/runtime
export IPYTHONDIR          := $(STATE)/ipython
export MPLCONFIGDIR        := $(STATE)/matplotlib
export TORCH_HOME          := $(STATE)/torch
export HF_HOME             := $(STATE)/huggingface
export XDG_CACHE_HOME      := $(STATE)/cache
export HF_HUB_OFFLINE      := 1
export PYTHONDONTWRITEBYTECODE := 1
$(shell mkdir -p $(JUPYTER_CONFIG_DIR) $(JUPYTER_DATA_DIR) $(JUPYTER_RUNTIME_DIR) $(IPYTHONDIR) $(MPLCONFIGDIR) $(TORCH_HOME) $(HF_HOME) $(XDG_CACHE_HOME))

# make certify [LESSONS="00_softmax_lookup 03_attention_scores"] [SAMPLE=5] [JOBS=2]: docs/fairness.md
.PHONY: certify setup run test lint test-browser test-site lab check instructor release grade doctor gpu site site-theme clean workshop-release workshop-collect workshop-grade workshop-return workshop-status

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@echo "== creating $(VENV) from constraints.txt (torch==2.13.0) =="
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)" >/dev/null
	@touch $@
	@echo "== $(VENV) ready =="

run: $(STAMP)
	$(BIN)/course run --profile $(PROFILE) --out $(OUT)

test: $(STAMP) lint
	$(BIN)/python -m pytest -n 3 --dist worksteal -q --durations=15 tests

# ruff, configured in pyproject.toml (make test runs it first).
lint: $(STAMP)
	$(BIN)/ruff check course tests bench book

# Every lesson's page in Chromium (make test drives four of them; see tests/test_browser.py).
test-browser: $(STAMP)
	COURSE_BROWSER_LESSONS=all $(BIN)/python -m pytest -n 2 --dist worksteal -q tests/test_browser.py

# The course as a website, tested (tests/test_site.py): `make run PROFILE=smoke` in a fresh copy, `make site` there
# (the theme built once, as `make site` does: node 18+ and npm), every page in Chromium. Minutes, so not in make test.
test-site: $(STAMP)
	COURSE_TEST_SITE=1 $(BIN)/python -m pytest -q tests/test_site.py

# make lab PORT=8899 ARGS="--no-browser --ip 0.0.0.0"; LESSONS=... for the workshop targets.
PORT ?=
ARGS ?=
LESSONS ?=
LAB_OPTS = $(if $(PORT),--port $(PORT)) $(ARGS)

lab: $(STAMP)
	$(BIN)/course lab $(LAB_OPTS)

# make check NOTEBOOK=notebooks/05_self_attention/05_self_attention.ipynb: its public tests, reported in words.
# Exit 0 once the report is printed (course check exits 1 while a test fails); 2 if it could not be checked.
NOTEBOOK ?=
check: $(STAMP)
	@test -n "$(NOTEBOOK)" || { echo "make check: name the notebook, e.g. make check NOTEBOOK=notebooks/05_self_attention/05_self_attention.ipynb" >&2; exit 2; }
	@$(BIN)/course check $(NOTEBOOK) || [ $$? -eq 1 ]

instructor: $(STAMP)
	$(BIN)/course lab --instructor --grades $(GRADES) $(LAB_OPTS)

workshop-release workshop-collect workshop-grade workshop-return workshop-status: $(STAMP)
	$(BIN)/course workshop $(@:workshop-%=%) $(LESSONS) --grades $(GRADES) $(ARGS)

# The fairness certificate (course/tools/fairness): every exercise's mutants and correct alternatives graded with
# `course grade`, written to docs/fairness.md and docs/fairness.json; exits 1 when a target is missed.
SAMPLE ?=
JOBS ?= 2
certify: $(STAMP)
	$(BIN)/python -m course.tools.fairness.certify $(if $(LESSONS),--lessons $(LESSONS)) $(if $(SAMPLE),--sample $(SAMPLE)) --jobs $(JOBS)

release: $(STAMP)
	$(BIN)/course release

grade: $(STAMP)
	$(BIN)/course grade $(SUBMISSIONS) --out $(GRADES)

doctor: $(STAMP)
	$(BIN)/course doctor

# The GPU checklist (bench/gpu.sh): every lesson's full profile and the benchmarks, one report.
GPU_OUT ?= results/gpu
gpu: $(STAMP)
	bench/gpu.sh $(GPU_OUT)

# The course as a website in $(SITE)/ (Jupyter Book 2, MyST): every lesson's student notebook with the
# plots of `make run`'s executed notebooks (OUT=results), and docs/. MyST's book theme is built once from
# book/theme/ into .state/book-theme/ (npm ci: packages from the npm registry, as pip's from PyPI); the
# site's build and its pages need no network. Needs node 18+ (Debian: apt-get install nodejs npm).
SITE  ?= _build/site
THEME ?= $(STATE)/book-theme
site: $(STAMP) $(THEME)/.built
	$(BIN)/python book/build.py --results $(OUT) --theme $(THEME) --out $(SITE)

site-theme: $(THEME)/.built

$(THEME)/.built: $(shell find book/theme -type f -not -path '*/node_modules/*' 2>/dev/null)
	@command -v npm >/dev/null || { echo "make site: needs node 18+ and npm (Debian: apt-get install nodejs npm)" >&2; exit 2; }
	rm -rf $(THEME) && mkdir -p $(THEME)
	cp -R book/theme/. $(THEME)/
	cd $(THEME) && npm_config_cache=$(STATE)/npm npm ci --no-audit --no-fund --legacy-peer-deps --loglevel=error
	cd $(THEME) && BROWSERSLIST_IGNORE_OLD_DATA=1 npm_config_cache=$(STATE)/npm npm run --silent build
	@touch $@

clean:
	rm -rf $(STATE) results autograde/workspace .pytest_cache _build
