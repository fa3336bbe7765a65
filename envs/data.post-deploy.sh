#!/usr/bin/env sh
# Snakemake runs this once, in the new environment, after creating it (--sdm conda): the jobs run
# `python -m workflow_lib...`, so the environment gets this checkout's package, editable (an edit reaches the jobs,
# and each rule's `code` param reruns what it changed). $0 is this file, in envs/ of the checkout.
set -eu
python -m pip install --no-deps --quiet --editable "$(dirname "$0")/.."
