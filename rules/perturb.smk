from workflow_lib.layout import SYNONYMS, benchmark_path, log_path, perturbed_template, train_condition_of
from workflow_lib.perturb.settings import perturb_settings, synonym_settings


rule synonyms:
    input:
        unpack(inputs.synonyms),
    output:
        SYNONYMS,
    log:
        log_path("synonyms/{tokenizer}/{dataset}/{synonyms}"),
    benchmark:
        benchmark_path("synonyms/{tokenizer}/{dataset}/{synonyms}")
    conda:
        "../envs/data.yaml"
    params:
        code=code_digest("workflow_lib.perturb.synonyms"),
        settings=lambda w: as_json(synonym_settings(config, w.tokenizer, w.dataset, w.synonyms)),
        tokens=lambda w, input: shell_words("--tokens", input.tokens) if "tokens" in input.keys() else "",
        pairs=lambda w, input: shell_words("--pairs", input.pairs) if "pairs" in input.keys() else "",
    shell:
        "python -m workflow_lib.perturb.synonyms --source {wildcards.synonyms:q} --tokenizer {input.tokenizer:q} {params.tokens} {params.pairs} --settings {params.settings:q} --output {output:q} 2> {log:q}"


rule perturb:
    input:
        unpack(inputs.perturb),
    output:
        parquet=perturbed_template(".parquet"),
        meta=perturbed_template(".json"),
    log:
        perturbed_template(".log", kind="logs/perturbed"),
    benchmark:
        perturbed_template(".tsv", kind="benchmarks/perturbed")
    conda:
        "../envs/data.yaml"
    params:
        code=code_digest("workflow_lib.perturb.training_data"),
        condition=lambda w: as_json(perturb_settings(config, train_condition_of(w), w.seed)),
        synonyms=lambda w, input: shell_words("--synonyms", input.synonyms) if "synonyms" in input.keys() else "",
        key=lambda w, output: output.parquet,
    shell:
        "python -m workflow_lib.perturb.training_data --tokens {input.tokens:q} --tokenizer {input.tokenizer:q} {params.synonyms} --condition {params.condition:q} --key {params.key:q} --output {output.parquet:q} --meta {output.meta:q} 2> {log:q}"
