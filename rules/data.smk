from workflow_lib.data.downloads import archive_path
from workflow_lib.data.downloads import members as archive_members
from workflow_lib.data.settings import prompt_settings
from workflow_lib.data.downloads import fetched_path, unpacked_dir
from workflow_lib.layout import (
    DATA,
    GGUF_DOWNLOAD,
    PRETRAINED_DIR,
    PROMPTS,
    PROMPTS_RECORD,
    TOKENIZER,
    TOKENS,
    benchmark_path,
    log_path,
)
from workflow_lib.pretrained import gguf_settings


# No `code` input, unlike every other rule: a fetched file is its URL's bytes, checked against its sha256, so a
# workflow_lib edit must neither download it again nor miss the output cache (whose key would include the code).
rule fetch:
    output:
        fetched_path("{dataset}", "{file}"),
    log:
        log_path("downloads/{dataset}/{file}"),
    # Between-workflow output cache (--cache with $SNAKEMAKE_OUTPUT_CACHE): a second study fetches nothing. The
    # key is the URL, checksum and head, not the dataset's name in this config.
    cache: "omit-software"
    localrule: True
    conda:
        "../envs/data.yaml"
    params:
        url=lambda w: inputs.fetch_entry(w)["url"],
        options=inputs.fetch_options,
    shell:
        "python -m workflow_lib.data.fetch download --what datasets.{wildcards.dataset:q} --url {params.url:q} {params.options} --output {output:q} 2> {log:q}"


rule unpack:
    input:
        archive=lambda w: archive_path(w.dataset, DATASETS[w.dataset]),
    output:
        directory(unpacked_dir("{dataset}")),
    log:
        log_path("downloads/{dataset}/unpack"),
    localrule: True
    conda:
        "../envs/data.yaml"
    params:
        code=code_digest("workflow_lib.data.fetch"),
        members=lambda w: as_json(archive_members(DATASETS[w.dataset])),
    shell:
        "python -m workflow_lib.data.fetch unpack --what datasets.{wildcards.dataset:q}.archive --archive {input.archive:q} --members {params.members:q} --output {output:q} 2> {log:q}"


rule download:
    input:
        data=inputs.download,
    output:
        parquet=f"{DATA}.parquet",
        meta=f"{DATA}.json",
    log:
        log_path("data/download/{dataset}/{split}"),
    # Between-workflow output cache (--cache with $SNAKEMAKE_OUTPUT_CACHE); snakemake allows no benchmark here.
    cache: "omit-software"
    localrule: True
    conda:
        "../envs/data.yaml"
    resources:
        mem_mb=4000,
    params:
        code=code_digest("workflow_lib.data.prepare"),
        spec=lambda w: as_json(split_spec(DATASETS[w.dataset], w.split)),
    shell:
        "python -m workflow_lib.data.prepare download --dataset {wildcards.dataset:q} --spec {params.spec:q} --split {wildcards.split:q} --output {output.parquet:q} --meta {output.meta:q} 2> {log:q}"


rule tokenizer:
    input:
        unpack(inputs.tokenizer),
    output:
        directory(TOKENIZER),
    log:
        log_path("tokenizers/{tokenizer}"),
    benchmark:
        benchmark_path("tokenizers/{tokenizer}")
    localrule: True
    conda:
        "../envs/data.yaml"
    params:
        code=code_digest("workflow_lib.data.tokenization"),
        spec=lambda w: as_json(TOKENIZERS[w.tokenizer]),
        train_data=lambda w, input: shell_words("--train-data", input.train) if "train" in input.keys() else "",
    shell:
        "python -m workflow_lib.data.tokenization tokenizer --key {wildcards.tokenizer:q} --spec {params.spec:q} {params.train_data} --output {output:q} 2> {log:q}"


rule tokenize:
    input:
        tokenizer=TOKENIZER,
        data=f"{DATA}.parquet",
    output:
        TOKENS,
    log:
        log_path("tokens/{tokenizer}/{dataset}/{split}"),
    # Between-workflow output cache (--cache with $SNAKEMAKE_OUTPUT_CACHE); snakemake allows no benchmark here.
    cache: "omit-software"
    conda:
        "../envs/data.yaml"
    params:
        code=code_digest("workflow_lib.data.tokenization"),
        block_size=config["tokenize"]["block_size"],
    shell:
        "python -m workflow_lib.data.tokenization tokenize --tokenizer {input.tokenizer:q} --input {input.data:q} --output {output:q} --block-size {params.block_size:q} 2> {log:q}"


rule prompts:
    input:
        unpack(inputs.prompts),
    output:
        parquet=PROMPTS,
        meta=PROMPTS_RECORD,
    log:
        log_path("prompts/{eval_set}"),
    benchmark:
        benchmark_path("prompts/{eval_set}")
    localrule: True
    conda:
        "../envs/data.yaml"
    params:
        code=code_digest("workflow_lib.data.prepare"),
        settings=lambda w: as_json(prompt_settings(config, w.eval_set)),
    shell:
        "python -m workflow_lib.data.prepare prompts --eval-set {wildcards.eval_set:q} --input {input.data:q} --source {input.source:q} --settings {params.settings:q} --output {output.parquet:q} --meta {output.meta:q} 2> {log:q}"


# A model's GGUF file named by URL (models.<model>.gguf.url), fetched and checked against its sha256 as a dataset
# file is; no `code` input, for the same reason as `fetch`.
rule fetch_gguf:
    output:
        GGUF_DOWNLOAD.format(model="{gguf_model}"),
    log:
        log_path("downloads/gguf/{gguf_model}"),
    cache: "omit-software"
    localrule: True
    conda:
        "../envs/data.yaml"
    params:
        url=lambda w: MODELS[w.gguf_model]["gguf"]["url"],
        options=inputs.gguf_fetch_options,
    shell:
        "python -m workflow_lib.data.fetch download --what models.{wildcards.gguf_model:q}.gguf --url {params.url:q} {params.options} --output {output:q} 2> {log:q}"


# A GGUF checkpoint dequantised once into the hub-style float32 folder that every later job loads as the model's
# `name` (workflow_lib/pretrained.py).
rule dequantise:
    input:
        unpack(inputs.gguf),
    output:
        directory(PRETRAINED_DIR.format(model="{gguf_model}")),
    log:
        log_path("pretrained/{gguf_model}"),
    benchmark:
        benchmark_path("pretrained/{gguf_model}")
    localrule: True
    conda:
        "../envs/train.yaml"
    resources:
        mem_mb=8000,
    params:
        code=code_digest("workflow_lib.data.gguf"),
        source=lambda w: as_json(gguf_settings(w.gguf_model, MODELS[w.gguf_model]["gguf"])),
        file=lambda w, input: shell_words("--gguf", input.gguf) if "gguf" in input.keys() else "",
    shell:
        "python -m workflow_lib.data.gguf --key {wildcards.gguf_model:q} --source {params.source:q} {params.file} --output {output:q} 2> {log:q}"


# A hub model pinned file by file (models.<model>.files, with name and revision): those files of that revision,
# each checked against its sha256, as the folder every later job loads as the model's `name` (workflow_lib/pretrained.py,
# workflow_lib/data/hub_files.py). No `code` input, for the same reason as `fetch`: the folder is the pinned bytes.
rule fetch_model:
    output:
        directory(PRETRAINED_DIR.format(model="{hub_model}")),
    log:
        log_path("pretrained/{hub_model}"),
    localrule: True
    conda:
        "../envs/data.yaml"
    params:
        hub=lambda w: as_json(MODELS[w.hub_model]["hub"]),
        options=inputs.hub_fetch_options,
    shell:
        "python -m workflow_lib.data.hub_files --key {wildcards.hub_model:q} --hub {params.hub:q} {params.options} --output {output:q} 2> {log:q}"
