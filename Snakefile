# perturbed-LM: "Perturbation is All You Need for Extrapolating Language Models", as a workflow.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/simulation.smk"
include: "rules/perturb.smk"
include: "rules/train.smk"
include: "rules/sample.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"


rule all:
    input:
        all_targets(),
    default_target: True
