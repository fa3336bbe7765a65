from workflow_lib.evaluate.settings import (
    control_text_settings,
    evaluation_settings,
    extrapolation_settings,
    feature_settings,
    lm_eval_settings,
    perplexity_settings,
)
from workflow_lib.layout import (
    CONTROL_FEATURES,
    CONTROL_TEXTS,
    CONTROLS,
    FEATURES,
    FEATURES_JOB,
    PROMPTS,
    benchmark_path,
    evaluation_of,
    log_path,
    prompts_path,
)
from workflow_lib.sample.settings import decoder_settings, test_perturbation


# MAUVE's controls (workflow_lib/evaluate/controls.py): known texts in the samples' layout, built from the eval set's
# own human text; no model is sampled.
rule control_texts:
    input:
        unpack(inputs.control_texts),
    output:
        CONTROL_TEXTS,
    log:
        log_path("control_texts/{eval_set}"),
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.evaluate.controls"),
        settings=lambda w: as_json(control_text_settings(config, w.eval_set)),
        other=lambda w, input: shell_words("--other", input.other) if "other" in input.keys() else "",
    shell:
        "python -m workflow_lib.evaluate.controls --eval-set {wildcards.eval_set:q} --prompts {input.prompts:q} --data {input.data:q} --settings {params.settings:q} {params.other} --output {output:q} 2> {log:q}"


# The human references' features and the control texts', one featuriser load on the GPU.
rule features:
    input:
        unpack(inputs.features),
    output:
        human=FEATURES,
        controls=CONTROL_FEATURES,
    log:
        log_path(FEATURES_JOB),
    benchmark:
        benchmark_path(FEATURES_JOB)
    conda:
        "../envs/evaluate.yaml"
    resources:
        gpu=config["evaluation"]["gpus"],
        runtime=predicted_runtime(FEATURES),
        mem_mb=predicted_mem(FEATURES),
    params:
        code=code_digest("workflow_lib.evaluate.features"),
        settings=lambda w: as_json(feature_settings(config)),
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.evaluate.features human --prompts {input.prompts:q} --control-texts {input.controls:q} --settings {params.settings:q} --output {output.human:q} --control-output {output.controls:q} 2> {log:q}"


# Each control's MAUVE against the human references (k-means on the CPU) and the verdict every MAUVE cell of the
# eval set reads: reported, or "MAUVE cannot see ...".
rule mauve_controls:
    input:
        human=FEATURES,
        features=CONTROL_FEATURES,
    output:
        CONTROLS,
    log:
        log_path("mauve_controls/{featuriser}/{eval_set}"),
    benchmark:
        benchmark_path("mauve_controls/{featuriser}/{eval_set}")
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.evaluate.control_scores"),
        settings=lambda w: as_json(evaluation_settings(config)),
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.evaluate.control_scores --human {input.human:q} --features {input.features:q} --settings {params.settings:q} --output {output:q} 2> {log:q}"


# An evaluation is two jobs: the model texts' features on the GPU, then MAUVE's k-means, ROUGE and diversity on the
# CPU, which holds no GPU (workflow_lib/evaluate/features.py).
rule sample_features:
    input:
        samples=SAMPLES_OUTPUT,
        prompts=PROMPTS,
    output:
        SAMPLE_FEATURES_OUTPUT,  # an evaluate and a mauve_contrast job's input
    log:
        evaluation_template("logs/sample_features", ".log"),
    benchmark:
        evaluation_template("benchmarks/sample_features", ".features.tsv")  # named as its output, for make estimate
    conda:
        "../envs/evaluate.yaml"
    resources:
        gpu=config["evaluation"]["gpus"],
        runtime=predicted_runtime(SAMPLE_FEATURES_OUTPUT),
        mem_mb=predicted_mem(SAMPLE_FEATURES_OUTPUT),
    params:
        code=code_digest("workflow_lib.evaluate.features"),
        settings=lambda w: as_json(feature_settings(config)),
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.evaluate.features samples --samples {input.samples:q} --prompts {input.prompts:q} --settings {params.settings:q} --output {output:q} 2> {log:q}"


rule evaluate:
    input:
        samples=SAMPLES_OUTPUT,
        prompts=PROMPTS,
        human=lambda w: FEATURES.format(featuriser=inputs.featuriser_id(), eval_set=w.eval_set),
        features=SAMPLE_FEATURES_OUTPUT,
        controls=inputs.controls,
    output:
        json=METRICS_OUTPUT,
        per_prompt=evaluation_template("metrics", ".prompts.parquet"),
        curves=evaluation_template("metrics", ".curves.parquet"),
    log:
        evaluation_template("logs/evaluate", ".log"),
    benchmark:
        evaluation_template("benchmarks/evaluate", ".tsv")
    conda:
        "../envs/evaluate.yaml"
    resources:
        runtime=predicted_runtime(METRICS_OUTPUT),
        mem_mb=predicted_mem(METRICS_OUTPUT),
    params:
        code=code_digest("workflow_lib.evaluate.metrics"),
        settings=lambda w: as_json(evaluation_settings(config)),
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.evaluate.metrics --samples {input.samples:q} --prompts {input.prompts:q} --human-features {input.human:q} --features {input.features:q} --controls {input.controls:q} --settings {params.settings:q} --output {output.json:q} --per-prompt {output.per_prompt:q} --curves {output.curves:q} 2> {log:q}"


# One job per evaluated model: the model is loaded once and scores the human text of every eval set it is evaluated
# on, each into <folder>/<eval set>.json and <eval set>.prompts.parquet.
rule perplexity:
    input:
        unpack(inputs.perplexity),
    output:
        directory(PERPLEXITY_OUTPUT),
    log:
        run_template("logs/perplexity", ".log"),
    benchmark:
        run_template("benchmarks/perplexity", ".tsv")
    conda:
        "../envs/train.yaml"
    resources:
        gpu=config["evaluation"]["gpus"],
        runtime=predicted_runtime(PERPLEXITY_OUTPUT),
        mem_mb=predicted_mem(PERPLEXITY_OUTPUT),
    params:
        code=code_digest("workflow_lib.evaluate.perplexity"),
        model=inputs.model_options,
        prompts=lambda w: shell_words(*(f"{es}={prompts_path(es)}" for es in inputs.perplexity_eval_sets(w))),
        settings=lambda w: as_json(perplexity_settings(config)),
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.evaluate.perplexity {params.model} --prompts {params.prompts} --settings {params.settings:q} --output-dir {output:q} 2> {log:q}"


# lm-evaluation-harness (evaluation.lm_eval; workflow_lib/evaluate/harness.py) on every evaluated model, trained and
# untrained: one job per model writes <task>.json and <task>.prompts.parquet per task. Not in the cost model: its
# SLURM time is cost.unknown_minutes, its memory the perplexity job's of the same model.
rule lm_eval:
    input:
        unpack(inputs.lm_eval),
    output:
        directory(LM_EVAL_OUTPUT),
    log:
        run_template("logs/lm_eval", ".log"),
    benchmark:
        run_template("benchmarks/lm_eval", ".tsv")
    conda:
        "../envs/harness.yaml"
    resources:
        gpu=config["evaluation"]["gpus"],
        runtime=lambda w, attempt: config["cost"]["unknown_minutes"] * attempt,
        mem_mb=predicted_mem(PERPLEXITY_OUTPUT),
    params:
        code=code_digest("workflow_lib.evaluate.harness"),
        model=inputs.model_options,
        tasks_folder=lambda w: shell_words(*harness_include(config)),
        eval_sets=lambda w: shell_words(
            *(["--eval-sets"] if inputs.lm_eval_eval_sets(w) else []),
            *(f"{es}={prompts_path(es)}" for es in inputs.lm_eval_eval_sets(w)),
        ),
        settings=lambda w: as_json(lm_eval_settings(config)),
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.evaluate.harness {params.model} {params.tasks_folder} {params.eval_sets} --settings {params.settings:q} --output-dir {output:q} 2> {log:q}"


rule extrapolation:
    input:
        unpack(inputs.sample),
    output:
        json=EXTRAPOLATION_OUTPUT,
        per_prompt=evaluation_template("extrapolation", ".prompts.parquet"),
    log:
        evaluation_template("logs/extrapolation", ".log"),
    benchmark:
        evaluation_template("benchmarks/extrapolation", ".tsv")
    conda:
        "../envs/evaluate.yaml"
    resources:
        gpu=config["evaluation"]["gpus"],
        runtime=predicted_runtime(EXTRAPOLATION_OUTPUT),
        mem_mb=predicted_mem(EXTRAPOLATION_OUTPUT),
    params:
        code=code_digest("workflow_lib.evaluate.extrapolation"),
        model=inputs.model_options,
        perturbation=lambda w: as_json(test_perturbation(config, evaluation_of(w).test)),
        decoder=lambda w: as_json(decoder_settings(config, evaluation_of(w).test)),
        builtin=lambda w: as_json(extrapolation_settings(config, w.eval_set)["builtin"]),
        split=lambda w: extrapolation_settings(config, w.eval_set)["split"],
        settings=lambda w: as_json(extrapolation_settings(config, w.eval_set)["settings"]),
        synonyms=lambda w, input: shell_words("--synonyms", input.synonyms) if "synonyms" in input.keys() else "",
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.evaluate.extrapolation {params.model} --prompts {input.prompts:q} {params.synonyms} --perturbation {params.perturbation:q} --decoder {params.decoder:q} --builtin {params.builtin:q} --split {params.split:q} --settings {params.settings:q} --output {output.json:q} --per-prompt {output.per_prompt:q} 2> {log:q}"
