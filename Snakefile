# perturbed-LM: "Perturbation is All You Need for Extrapolating Language Models", as a workflow.
import os
import sys

from snakemake.utils import min_version

min_version("9.19")  # reads profiles/*/profile.yaml

sys.path.insert(0, workflow.basedir)  # this checkout's workflow_lib, installed or not

from workflow_lib.config_files import exit_on_bad_yaml
from workflow_lib.layout import REPORT_LANDING

# The default study. A study given with --configfile replaces it instead of being merged into it. Read through the
# workflow's reader first: snakemake's own YAML error names neither the file nor the line.
if not workflow.overwrite_configfiles:
    exit_on_bad_yaml("config.yaml")

    configfile: "config.yaml"


# The HTML report opens on its description: with the study's findings once the tables job wrote them.
LANDING = REPORT_LANDING


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
