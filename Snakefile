# perturbed-LM: "Perturbation is All You Need for Extrapolating Language Models", as a workflow.
import os

from snakemake.utils import min_version

min_version("9.19")  # reads profiles/*/profile.yaml

# workflow_lib at parse time: snakemake puts this Snakefile's folder on sys.path itself (a checkout's package first);
# the jobs run `python -m workflow_lib...` with the package installed (pip install, envs/*.post-deploy.sh), or with
# the checkout on the PYTHONPATH of the snakemake process (docs/usage.md).
from workflow_lib.config_files import exit_on_bad_yaml
from workflow_lib.layout import REPORT_LANDING

# False where another workflow imports this one (`module perturbed_lm: ...`, docs/usage.md): the importer's config
# (the module's `config:`) is the study, and its own target rule is the default (snakemake's own test for onstart).
MAIN_WORKFLOW = workflow.modifier.is_main_snakefile()

# A study's own files (--configfile): snakemake has read them already, keeping the last of a key written twice in one
# mapping; read again through the workflow's reader, which refuses that, naming the file and the line.
if MAIN_WORKFLOW:
    for path in workflow.overwrite_configfiles or ():
        exit_on_bad_yaml(path)

# The default study. A study given with --configfile replaces it instead of being merged into it. Read through the
# workflow's reader first: snakemake's own YAML error names neither the file nor the line.
if MAIN_WORKFLOW and not workflow.overwrite_configfiles:
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


# A plain `snakemake` writes the results, not the HTML report: its last line says whether the report is current and
# how to refresh it (workflow_lib/report/settings.py, report_status).
onsuccess:
    if MAIN_WORKFLOW and (status := report_status()):
        print(status)


# The study's targets. Imported with `use rule * from perturbed_lm as plm_*` it is plm_all, and not the default target:
# with `default_target: True` in a module, snakemake would make it the importer's default over the importer's own.
rule all:
    default_target: MAIN_WORKFLOW
    input:
        all_targets(config),
    localrule: True
