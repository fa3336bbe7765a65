# perturbed-LM: "Perturbation is All You Need for Extrapolating Language Models", as a workflow.
import os

from snakemake.utils import min_version

min_version("9.19")  # reads profiles/*/profile.yaml


# The default study. A study given with --configfile replaces it instead of being merged into it.
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


# The HTML report opens on its description: with the study's findings once the tables job wrote them.
LANDING = "results/report/workflow.rst"


report: os.path.abspath(LANDING) if os.path.exists(LANDING) else "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/simulation.smk"
include: "rules/perturb.smk"
include: "rules/train.smk"
include: "rules/sample.smk"
include: "rules/evaluate.smk"
include: "rules/lab.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        all_targets(config),
