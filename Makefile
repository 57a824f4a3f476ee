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
.PHONY: certify setup run test lint test-browser lab instructor release grade doctor gpu clean workshop-release workshop-collect workshop-grade workshop-return workshop-status

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
	$(BIN)/python -m pytest -n 2 --dist worksteal -q --durations=15 tests

# ruff, configured in pyproject.toml (make test runs it first).
lint: $(STAMP)
	$(BIN)/ruff check course tests bench

# Every lesson's page in Chromium (make test drives four of them; see tests/test_browser.py).
test-browser: $(STAMP)
	COURSE_BROWSER_LESSONS=all $(BIN)/python -m pytest -n 2 --dist worksteal -q tests/test_browser.py

# make lab PORT=8899 ARGS="--no-browser --ip 0.0.0.0"; LESSONS=... for the workshop targets.
PORT ?=
ARGS ?=
LESSONS ?=
LAB_OPTS = $(if $(PORT),--port $(PORT)) $(ARGS)

lab: $(STAMP)
	$(BIN)/course lab $(LAB_OPTS)

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

clean:
	rm -rf $(STATE) results autograde/workspace .pytest_cache
