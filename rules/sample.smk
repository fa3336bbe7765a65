from workflow_lib.layout import evaluation_of
from workflow_lib.sample.settings import decoder_settings, sampling_settings, test_perturbation


rule sample:
    input:
        unpack(inputs.sample),
    output:
        SAMPLES_OUTPUT,
    log:
        evaluation_template("logs/sample", ".log"),
    benchmark:
        evaluation_template("benchmarks/sample", ".tsv")
    conda:
        "../envs/train.yaml"
    resources:
        gpu=config["sampling"]["gpus"],
        runtime=predicted_runtime(SAMPLES_OUTPUT),
        mem_mb=predicted_mem(SAMPLES_OUTPUT),
    params:
        code=code_digest("workflow_lib.sample.sampler"),
        model=inputs.model_options,
        perturbation=lambda w: as_json(test_perturbation(evaluation_of(w).test)),
        decoder=lambda w: as_json(decoder_settings(config, evaluation_of(w).test)),
        settings=lambda w: as_json(sampling_settings(config, evaluation_of(w).test)),
        synonyms=lambda w, input: f"--synonyms {input.synonyms}" if "synonyms" in input.keys() else "",
    shell:
        "OMP_NUM_THREADS={threads} python -m workflow_lib.sample.sampler {params.model} --prompts {input.prompts} {params.synonyms} --perturbation {params.perturbation:q} --decoder {params.decoder:q} --settings {params.settings:q} --output {output} 2> {log}"
