from workflow_lib.evaluate.settings import evaluation_settings, planted_settings
from workflow_lib.files import sha256_file, write_argument_file
from workflow_lib.grid import (
    LM_EVAL_TABLE,
    REPORT_TABLES,
    control_targets,
    data_records,
    example_inputs,
    extrapolation_targets,
    lab_targets,
    metric_targets,
    model_targets,
    planted_targets,
    simulation_summary_input,
    synonym_audit_tables,
)
from workflow_lib.layout import (
    ARGUMENT_FILE,
    CONTROL_FEATURES,
    FEATURES,
    MAUVE_CONTRAST,
    PLANTED,
    REPORT,
    REPORT_FIGURE,
    REPORT_TABLE,
    SUMMARY,
    TRACKED,
    TRAINING_FIGURE,
    benchmark_path,
    log_path,
    filled,
    prompts_path,
)
from workflow_lib.report.settings import report_settings, report_status, report_view, tracker_settings


# The paths a gather job reads, one a line, for argparse's @file: on the command line they would pass the kernel's
# limit for one argument (128 KiB) in a large study. The list is the job's params, so a change rewrites the file
# (and reruns the job that reads it); an unchanged list leaves it alone.
rule argument_file:
    output:
        ARGUMENT_FILE,
    log:
        log_path("report/args/{name}"),
    wildcard_constraints:
        name=_names(inputs.argument_lists),
    localrule: True
    params:
        arguments=lambda w: inputs.argument_lists[w.name],
    run:
        write_argument_file(params.arguments, output[0], log=log[0])


rule collect_metrics:
    input:
        metrics=metric_targets(config) + extrapolation_targets(config),
        perplexity=list(inputs.perplexity_jobs),
        arguments=argument_file("collect"),
    output:
        filled(REPORT, file="metrics.csv"),
    log:
        log_path("report/collect"),
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.build"),
    shell:
        "python -m workflow_lib.report.build collect --output {output:q} @{input.arguments:q} 2> {log:q}"


rule mauve_contrast:
    input:
        unpack(inputs.mauve_contrast),
    output:
        MAUVE_CONTRAST,
    log:
        log_path("report/mauve/{pair}"),
    benchmark:
        benchmark_path("report/mauve/{pair}")
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.joint_mauve"),
        settings=lambda w: as_json(evaluation_settings(config)),
        resamples=lambda w: inputs.mauve_contrasts[w.pair]["resamples"],
        identity=lambda w: inputs.mauve_contrasts[w.pair]["identity"],
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.report.joint_mauve --a {input.a:q} --b {input.b:q} --features-a {input.features_a:q} --features-b {input.features_b:q} --human {input.human:q} --prompts {input.prompts:q} --settings {params.settings:q} --resamples {params.resamples:q} --identity {params.identity:q} --output {output:q} 2> {log:q}"


# MAUVE's planted control of one eval set: what size of gap its MAUVE contrasts can see (report/planted.py).
rule planted_control:
    input:
        human=FEATURES,
        features=CONTROL_FEATURES,
    output:
        PLANTED,
    log:
        log_path("report/planted/{featuriser}/{eval_set}"),
    benchmark:
        benchmark_path("report/planted/{featuriser}/{eval_set}")
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.planted"),
        settings=lambda w: as_json(planted_settings(config)),
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.report.planted --human {input.human:q} --features {input.features:q} --settings {params.settings:q} --identity planted/{wildcards.featuriser:q}/{wildcards.eval_set:q} --output {output:q} 2> {log:q}"


rule contrasts:
    input:
        # The metrics JSON and their per-prompt sidecars, listed so that they are inputs too (contrasts reads them
        # beside each JSON); the perplexity folders hold both files of each eval set.
        metrics=metric_targets(config) + extrapolation_targets(config),
        sidecars=inputs.metric_sidecars(),
        perplexity=list(inputs.perplexity_jobs),
        mauve=inputs.mauve_contrast_targets(),
        arguments=argument_file("contrasts"),
    output:
        filled(REPORT, file="contrasts.csv"),
    log:
        log_path("report/contrasts"),
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.contrasts"),
        intensity=config["report"]["intensity"],
        null=int(config["report"]["aa_null"]),
    shell:
        "python -m workflow_lib.report.contrasts --intensity {params.intensity:q} --null {params.null:q} --output {output:q} @{input.arguments:q} 2> {log:q}"


# Where each contrast's variance comes from (seeds, prompts, runs, MAUVE's k-means), with intervals: the summary's table
# and the CSV `make design` sizes a study from (workflow_lib.report.variance, workflow_lib.report.design).
rule variance:
    input:
        metrics=metric_targets(config) + extrapolation_targets(config),
        sidecars=inputs.metric_sidecars(),
        arguments=argument_file("variance"),
    output:
        md=report(
            REPORT_TABLE.format(table="variance", ext="md"),
            caption="../report/variance.rst",
            category="Tables",
            subcategory="variance",
            labels={"table": "variance", "format": "md"},
        ),
        csv=REPORT_TABLE.format(table="variance", ext="csv"),
    log:
        log_path("report/variance"),
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.variance"),
        intensity=config["report"]["intensity"],
        stem=lambda w, output: output.md.removesuffix(".md"),
    shell:
        "python -m workflow_lib.report.variance --intensity {params.intensity:q} --stem {params.stem:q} @{input.arguments:q} 2> {log:q}"


# What each synonym table holds, as text: a seeded sample of sources with their synonyms and weights, and the share of the
# training tokens that have any (workflow_lib.report.synonym_audit).
rule synonym_audit:
    input:
        tables=[table for table, _tokenizer, _tokens in synonym_audit_tables(config)],
        tokenizers=sorted({tokenizer for _table, tokenizer, _tokens in synonym_audit_tables(config)}),
        tokens=sorted({tokens for _table, _tokenizer, tokens in synonym_audit_tables(config) if tokens}),
    output:
        md=report(
            REPORT_TABLE.format(table="synonyms", ext="md"),
            caption="../report/synonyms.rst",
            category="Tables",
            subcategory="synonyms",
            labels={"table": "synonyms", "format": "md"},
        ),
        csv=REPORT_TABLE.format(table="synonyms", ext="csv"),
    log:
        log_path("report/synonyms"),
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.synonym_audit"),
        seed=config["seed"],
        tables=shell_words(
            *(
                word
                for table, tokenizer, tokens in synonym_audit_tables(config)
                for word in ("--table", table, tokenizer, tokens or "none")
            )
        ),
        stem=lambda w, output: output.md.removesuffix(".md"),
    shell:
        "python -m workflow_lib.report.synonym_audit --seed {params.seed:q} {params.tables} --stem {params.stem:q} 2> {log:q}"


rule tables:
    input:
        metrics=filled(REPORT, file="metrics.csv"),
        contrasts=filled(REPORT, file="contrasts.csv"),
        simulation=simulation_summary_input(config),
        data=data_records(config),
        lab=[t for t in lab_targets(config) if t.endswith(".md")],
        models=model_targets(config),
        controls=control_targets(config),
        planted=planted_targets(config),
        synonyms=REPORT_TABLE.format(table="synonyms", ext="md"),
        variance=REPORT_TABLE.format(table="variance", ext="md"),
        arguments=argument_file("tables"),
    output:
        summary=report(SUMMARY, caption="../report/summary.rst", category="Summary"),
        landing=LANDING,
        tables=[
            report(
                REPORT_TABLE.format(table=t, ext=ext),
                caption="../report/table.rst",
                category="Tables",
                subcategory=t,
                labels={"table": t, "format": ext},
            )
            for t in REPORT_TABLES
            for ext in ("md", "csv", "tex")
        ],
    log:
        log_path("report/tables"),
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.build"),
        description=sha256_file(workflow.source_path("../report/workflow.rst")),
        config=lambda w: as_json(report_view(config)),
        settings=lambda w: as_json(report_settings(config)),
        folder=lambda w, output: os.path.dirname(output.tables[0]),
    shell:
        "python -m workflow_lib.report.build tables --metrics {input.metrics:q} --config {params.config:q} --settings {params.settings:q} --out-dir {params.folder:q} --summary {output.summary:q} --landing {output.landing:q} --simulation {input.simulation:q} --contrasts {input.contrasts:q} --synonyms {input.synonyms:q} --variance {input.variance:q} @{input.arguments:q} 2> {log:q}"


# The lm-evaluation-harness's scores of every evaluated model and its contrasts over documents, when the study runs it
# (evaluation.lm_eval; workflow_lib/report/harness.py).
rule lm_eval_report:
    input:
        results=lambda w: list(inputs.lm_eval_jobs),
        arguments=argument_file("lm_eval"),
    output:
        md=report(
            filled(REPORT_TABLE, table=LM_EVAL_TABLE, ext="md"),
            caption="../report/lm_eval.rst",
            category="Tables",
        ),
        csv=filled(REPORT_TABLE, table=LM_EVAL_TABLE, ext="csv"),
        contrasts=filled(REPORT, file="lm_eval_contrasts.csv"),
    log:
        log_path("report/lm_eval"),
    localrule: True
    conda:
        "../envs/harness.yaml"
    params:
        code=code_digest("workflow_lib.report.harness"),
        intensity=config["report"]["intensity"],
    shell:
        "python -m workflow_lib.report.harness --intensity {params.intensity:q} --table {output.md:q} --csv {output.csv:q} --contrasts {output.contrasts:q} @{input.arguments:q} 2> {log:q}"


# The finished study's results in the trackers it names (report.report_to; workflow_lib/report/trackers.py): only
# where it names one, and a change to them reruns this job alone.
rule track_results:
    input:
        metrics=filled(REPORT, file="metrics.csv"),
        contrasts=filled(REPORT, file="contrasts.csv"),
        summary=SUMMARY,
        tables=[REPORT_TABLE.format(table=t, ext="md") for t in REPORT_TABLES],
    output:
        TRACKED,
    log:
        log_path("report/track_results"),
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.trackers"),
        settings=lambda w: as_json(tracker_settings(config, os.getcwd())),
    shell:
        "python -m workflow_lib.report.trackers --metrics {input.metrics:q} --contrasts {input.contrasts:q} --summary {input.summary:q} --tables {input.tables:q} --settings {params.settings:q} --output {output:q} 2> {log:q}"


rule figure:
    input:
        metrics=filled(REPORT, file="metrics.csv"),
        contrasts=filled(REPORT, file="contrasts.csv"),  # the extrapolation figure's paired intervals
    output:
        png=report(
            filled(REPORT_FIGURE, ext="png"),
            caption="../report/figure.rst",
            category="Figures",
            labels={"figure": "{figure}"},
        ),
        pdf=filled(REPORT_FIGURE, ext="pdf"),
    log:
        log_path("report/figure_{figure}"),
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.build"),
        intensity=config["report"]["intensity"],
        stem=lambda w, output: output.png.removesuffix(".png"),
    shell:
        "python -m workflow_lib.report.build figure --metrics {input.metrics:q} --name {wildcards.figure:q} --intensity {params.intensity:q} --stem {params.stem:q} --contrasts {input.contrasts:q} 2> {log:q}"


rule examples:
    input:
        prompts=prompts_path(example_inputs(config)[0]),
        samples=example_inputs(config)[1],
        arguments=argument_file("examples"),
    output:
        report(
            REPORT_TABLE.format(table="examples", ext="md"),
            caption="../report/examples.rst",
            category="Tables",
            subcategory="examples",
            labels={"table": "examples", "format": "md"},
        ),
        REPORT_TABLE.format(table="examples", ext="csv"),
        REPORT_TABLE.format(table="examples", ext="tex"),
    log:
        log_path("report/examples"),
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.build"),
        stem=lambda w, output: output[0].removesuffix(".md"),
    shell:
        "python -m workflow_lib.report.build examples --prompts {input.prompts:q} --stem {params.stem:q} @{input.arguments:q} 2> {log:q}"


rule training_curves:
    input:
        models=inputs.training_curves,
        arguments=lambda w: argument_file(curves_argument(w.model, w.dataset)),
    output:
        png=report(
            filled(TRAINING_FIGURE, ext="png"),
            caption="../report/training.rst",
            category="Training curves",
            labels={"model": "{model}", "dataset": "{dataset}"},
        ),
        pdf=filled(TRAINING_FIGURE, ext="pdf"),
    log:
        log_path("report/training_{model}_{dataset}"),
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.report.build"),
        stem=lambda w, output: output.png.removesuffix(".png"),
    shell:
        "python -m workflow_lib.report.build curves --stem {params.stem:q} @{input.arguments:q} 2> {log:q}"
