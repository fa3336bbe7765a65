from workflow_lib.layout import run_of
from workflow_lib.train.settings import launcher, tracking_settings, training_processes, training_settings
from workflow_lib.train.tracking import ENV as TRACKING_ENV

# The trackers reach the train jobs through their environment, not params: turning one on must not retrain a
# finished model (workflow_lib/train/tracking.py). Set here rather than as a prefix of the shell command, whose
# text is the rule's code: an edited command would retrain every finished model once.
os.environ[TRACKING_ENV] = json.dumps(tracking_settings(config))


rule train:
    input:
        unpack(inputs.train),
    output:
        directory(MODEL_OUTPUT),
    log:
        run_template("logs/train", ".log"),
    benchmark:
        run_template("benchmarks/train", ".tsv")
    priority: TRAIN_PRIORITY
    conda:
        "../envs/train.yaml"
    # One core per process; each process runs one thread (OMP_NUM_THREADS=1): processes, not threads, scale it.
    threads: lambda w: training_processes(config, w.model)
    resources:
        gpu=lambda w: training_settings(config, w.model, w.seed)["gpus"],
        runtime=predicted_runtime(MODEL_OUTPUT),
        mem_mb=predicted_mem(MODEL_OUTPUT),
    params:
        code=code_digest("workflow_lib.train.trainer"),
        launch=lambda w: launcher(config, w.model, w.seed),
        model=lambda w: as_json(MODELS[w.model]),
        objective=lambda w: as_json(config["objectives"][w.objective]),
        settings=lambda w: as_json(training_settings(config, w.model, w.seed)),
        validation=lambda w, input: (
            shell_words("--validation", input.validation) if "validation" in input.keys() else ""
        ),
        # Not an output: snakemake must not delete it when the job fails, so a rerun resumes from it.
        resume=lambda w: run_of(w).folder("checkpoints"),
    shell:
        "OMP_NUM_THREADS=1 {params.launch} -m workflow_lib.train.trainer --train {input.train:q} {params.validation} --tokenizer {input.tokenizer:q} --model-key {wildcards.model:q} --model {params.model:q} --objective {params.objective:q} --settings {params.settings:q} --resume-dir {params.resume:q} --output {output:q} 2> {log:q}"
