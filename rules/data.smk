rule download:
    input:
        download_inputs,
        code=workflow_code("workflow_lib.data"),
    output:
        parquet="results/data/{dataset}/{split}.parquet",
        meta="results/data/{dataset}/{split}.json",
    params:
        spec=lambda w: as_json(DATASETS[w.dataset]),
    log:
        "results/logs/data/download/{dataset}/{split}.log",
    resources:
        mem_mb=4000,
    # Between-workflow output cache (--cache with $SNAKEMAKE_OUTPUT_CACHE); snakemake allows no benchmark here.
    cache: "omit-software"
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_lib.data download --dataset {wildcards.dataset} --spec {params.spec:q} --split {wildcards.split} --output {output.parquet} --meta {output.meta} 2> {log}"


rule tokenizer:
    input:
        unpack(tokenizer_inputs),
        code=workflow_code("workflow_lib.tokenization"),
    output:
        directory("results/tokenizers/{tokenizer}"),
    params:
        spec=lambda w: as_json(TOKENIZERS[w.tokenizer]),
        train_data=lambda w, input: f"--train-data {input.train}" if "train" in input.keys() else "",
    log:
        "results/logs/tokenizers/{tokenizer}.log",
    benchmark:
        "results/benchmarks/tokenizers/{tokenizer}.tsv"
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_lib.tokenization tokenizer --key {wildcards.tokenizer} --spec {params.spec:q} {params.train_data} --output {output} 2> {log}"


rule tokenize:
    input:
        tokenizer="results/tokenizers/{tokenizer}",
        data="results/data/{dataset}/{split}.parquet",
        code=workflow_code("workflow_lib.tokenization"),
    output:
        "results/tokens/{tokenizer}/{dataset}/{split}.parquet",
    params:
        block_size=config["tokenize"]["block_size"],
    log:
        "results/logs/tokens/{tokenizer}/{dataset}/{split}.log",
    # Between-workflow output cache (--cache with $SNAKEMAKE_OUTPUT_CACHE); snakemake allows no benchmark here.
    cache: "omit-software"
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_lib.tokenization tokenize --tokenizer {input.tokenizer} --input {input.data} --output {output} --block-size {params.block_size} 2> {log}"


rule prompts:
    input:
        data=prompts_input,
        code=workflow_code("workflow_lib.data"),
    output:
        parquet="results/prompts/{eval_set}.parquet",
        meta="results/prompts/{eval_set}.json",
    params:
        settings=lambda w: as_json(prompt_settings(w)),
    log:
        "results/logs/prompts/{eval_set}.log",
    benchmark:
        "results/benchmarks/prompts/{eval_set}.tsv"
    conda:
        "../envs/data.yaml"
    shell:
        "python -m workflow_lib.data prompts --eval-set {wildcards.eval_set} --input {input.data} --settings {params.settings:q} --output {output.parquet} --meta {output.meta} 2> {log}"
