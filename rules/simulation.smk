from workflow_lib.grid import simulation_fits
from workflow_lib.simulation.settings import simulation_settings


rule simulation_fit:
    output:
        "results/simulation/V{vocab}.parquet",
    log:
        "results/logs/simulation/V{vocab}.log",
    benchmark:
        "results/benchmarks/simulation/V{vocab}.tsv"
    wildcard_constraints:
        vocab=r"[0-9]+",
    conda:
        "../envs/simulation.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        code=code_digest("workflow_lib.simulation.study"),
        settings=lambda w: as_json(simulation_settings(config)),
    shell:
        "python -m workflow_lib.simulation.study fit --vocab-size {wildcards.vocab} --settings {params.settings:q} --threads {threads} --output {output} 2> {log}"


rule simulation_summary:
    input:
        fits=simulation_fits(config),
    output:
        csv="results/simulation/summary.csv",
        markdown=report(
            "results/simulation/summary.md",
            caption="../report/simulation.rst",
            category="Simulation",
            labels={"output": "summary table"},
        ),
        png=report(
            "results/simulation/figure.png",
            caption="../report/simulation.rst",
            category="Simulation",
            labels={"output": "figure"},
        ),
        pdf="results/simulation/figure.pdf",
        tests="results/simulation/tests.csv",
        conclusions=report(
            "results/simulation/conclusions.md",
            caption="../report/simulation.rst",
            category="Simulation",
            labels={"output": "conclusions"},
        ),
    log:
        "results/logs/simulation/summary.log",
    benchmark:
        "results/benchmarks/simulation/summary.tsv"
    conda:
        "../envs/simulation.yaml"
    params:
        code=code_digest("workflow_lib.simulation.summary"),
        stem=lambda w, output: output.png.removesuffix(".png"),
    shell:
        "python -m workflow_lib.simulation.summary --inputs {input.fits} --csv {output.csv} --markdown {output.markdown} --figure {params.stem} --tests {output.tests} --conclusions {output.conclusions} 2> {log}"
