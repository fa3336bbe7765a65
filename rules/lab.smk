from workflow_lib.grid import lab_inputs
from workflow_lib.layout import LAB, LAB_SET, benchmark_path, log_path, filled
from workflow_lib.lab.settings import lab_settings


rule lab_sets:
    output:
        LAB_SET,
    log:
        log_path("lab/sets/{dataset}"),
    benchmark:
        benchmark_path("lab/sets/{dataset}")
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.lab.laws"),
        builtin=lambda w: as_json(DATASETS[w.dataset]["builtin"]),
        settings=lambda w: as_json(lab_settings(config, "prefixes", "length", "deltas", "last", "tries")),
    shell:
        "python -m workflow_lib.lab.laws sets --builtin {params.builtin:q} --settings {params.settings:q} --output {output:q} 2> {log:q}"


rule lab_laws:
    input:
        unpack(inputs.model),
        sets=LAB_SET,
    output:
        run_template("lab/laws", ".npz"),
    log:
        run_template("logs/lab/laws", ".log"),
    benchmark:
        run_template("benchmarks/lab/laws", ".tsv")
    conda:
        "../envs/evaluate.yaml"
    resources:
        gpu=config["evaluation"]["gpus"],
    params:
        code=code_digest("workflow_lib.lab.laws"),
        model=inputs.model_options,
        builtin=lambda w: as_json(DATASETS[w.dataset]["builtin"]),
        settings=lambda w: as_json(lab_settings(config, "last", "draws", "perturbations")),
    shell:
        "OMP_NUM_THREADS={threads:q} python -m workflow_lib.lab.laws laws {params.model} --sets {input.sets:q} --builtin {params.builtin:q} --settings {params.settings:q} --output {output:q} 2> {log:q}"


rule lab:
    input:
        unpack(lambda w: lab_inputs(config, w.experiment)),
    output:
        csv=filled(LAB, file="uncertainty.csv"),
        premise=filled(LAB, file="premise.csv"),
        markdown=report(
            filled(LAB, file="uncertainty.md"),
            caption="../report/lab.rst",
            category="Theory lab",
            labels={"experiment": "{experiment}", "output": "table"},
        ),
        png=report(
            filled(LAB, file="figure.png"),
            caption="../report/lab.rst",
            category="Theory lab",
            labels={"experiment": "{experiment}", "output": "figure"},
        ),
        pdf=filled(LAB, file="figure.pdf"),
    log:
        log_path("lab/{experiment}"),
    benchmark:
        benchmark_path("lab/{experiment}")
    wildcard_constraints:
        experiment=_names(config["lab"]["experiments"]),
    localrule: True
    conda:
        "../envs/evaluate.yaml"
    params:
        code=code_digest("workflow_lib.lab.verdicts"),
        builtin=lambda w: as_json(DATASETS[EXPERIMENTS[w.experiment]["train_dataset"]]["builtin"]),
        settings=lambda w: as_json(lab_settings(config, "last", "length", "draws", "premise_draws", "perturbations")),
        stem=lambda w, output: output.png.removesuffix(".png"),
    shell:
        "python -m workflow_lib.lab.verdicts --prefixes {input.prefixes:q} --laws {input.laws:q} --builtin {params.builtin:q} --settings {params.settings:q} --csv {output.csv:q} --premise {output.premise:q} --markdown {output.markdown:q} --figure {params.stem:q} 2> {log:q}"
