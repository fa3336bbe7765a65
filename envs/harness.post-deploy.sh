#!/usr/bin/env sh
# Snakemake runs this once, in the new environment, after creating it (--sdm conda): the jobs run
# `python -m workflow_lib...`, so the environment gets the package the workflow runs. Snakemake runs a copy of this
# file (under .snakemake/conda/, or a temporary one for a module read from GitHub), so its own path says nothing of
# the workflow's; rules/common.smk exports where the package came from (workflow_lib/install_source.py): a checkout,
# editable (an edit reaches the jobs, and each rule's `code` param reruns what it changed), or the git commit or
# release it was installed from.
set -eu
: "${PERTURBED_LM_SOURCE:?is set by the workflow (rules/common.smk): create the environments through snakemake}"
if [ "${PERTURBED_LM_EDITABLE:-0}" = 1 ]; then
    python -m pip install --no-deps --quiet --editable "$PERTURBED_LM_SOURCE"
else
    python -m pip install --no-deps --quiet "$PERTURBED_LM_SOURCE"
fi
