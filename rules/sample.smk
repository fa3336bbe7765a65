from workflow_lib.layout import evaluation_of, shard_of, shard_template
from workflow_lib.sample.settings import decoder_settings, sampling_settings, test_perturbation


# One shard of an evaluation's samples: whole batches of its rows (workflow_lib/sample/shards.py). How many shards
# each evaluation has comes from its planned rows and sampling.shard_batches (inputs.sample_shards); a shard is kept until
# gather_samples has joined them, so a lost shard reruns alone.
rule sample:
    input:
        unpack(inputs.sample),
    output:
        temp(SHARD_OUTPUT),
    log:
        shard_template("logs/sample", ".log"),
    benchmark:
        shard_template("benchmarks/sample", ".tsv")
    priority: sampling_priority
    conda:
        "../envs/train.yaml"
    resources:
        gpu=config["sampling"]["gpus"],
        runtime=predicted_runtime(SHARD_OUTPUT),
        mem_mb=predicted_mem(SHARD_OUTPUT),
    params:
        code=code_digest("workflow_lib.sample.sampler"),
        model=inputs.model_options,
        perturbation=lambda w: as_json(test_perturbation(config, evaluation_of(w).test)),
        decoder=lambda w: as_json(decoder_settings(config, evaluation_of(w).test)),
        settings=lambda w: as_json(sampling_settings(config, evaluation_of(w).test)),
        synonyms=lambda w, input: shell_words("--synonyms", input.synonyms) if "synonyms" in input.keys() else "",
        shard=lambda w: "{index}/{count}".format(**vars(shard_of(w))),
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.sample.sampler {params.model} --prompts {input.prompts:q} {params.synonyms} --perturbation {params.perturbation:q} --decoder {params.decoder:q} --settings {params.settings:q} --shard {params.shard:q} --output {output:q} 2> {log:q}"


# The shards' rows in order: the samples file the unsharded job writes, byte for byte. The shards are named by their
# folder (each records its index), so the command stays short however many there are.
rule gather_samples:
    input:
        inputs.sample_shards,
    output:
        SAMPLES_OUTPUT,
    log:
        evaluation_template("logs/gather_samples", ".log"),
    localrule: True
    conda:
        "../envs/train.yaml"
    params:
        code=code_digest("workflow_lib.sample.gather"),
        folder=lambda w, input: os.path.dirname(input[0]),  # the shards' folder: a short command for any number
        shards=lambda w, input: len(input),
    shell:
        "python -m workflow_lib.sample.gather --folder {params.folder:q} --count {params.shards:q} --output {output:q} 2> {log:q}"
