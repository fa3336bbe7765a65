rule simulation_fit:
    output:
        "results/simulation/V{vocab}.parquet",
    params:
        settings=lambda w: as_json(simulation_settings()),
    log:
        "results/logs/simulation/V{vocab}.log",
    benchmark:
        "results/benchmarks/simulation/V{vocab}.tsv"
    wildcard_constraints:
        vocab=r"[0-9]+",
    threads: 2
    resources:
        mem_mb=4000,
    conda:
        "../envs/simulation.yaml"
    shell:
        "python -m workflow_lib.simulation fit --vocab-size {wildcards.vocab} --settings {params.settings:q} --threads {threads} --output {output} 2> {log}"


rule simulation_summary:
    input:
        simulation_fits(),
    output:
        csv="results/simulation/summary.csv",
        markdown="results/simulation/summary.md",
        png="results/simulation/figure.png",
        pdf="results/simulation/figure.pdf",
    params:
        stem=lambda w, output: output.png.removesuffix(".png"),
    log:
        "results/logs/simulation/summary.log",
    benchmark:
        "results/benchmarks/simulation/summary.tsv"
    conda:
        "../envs/simulation.yaml"
    shell:
        "python -m workflow_lib.simulation summarize --inputs {input} --csv {output.csv} --markdown {output.markdown} --figure {params.stem} 2> {log}"
