from workflow_lib.grid import simulation_fits
from workflow_lib.layout import SIMULATION, SIMULATION_FIT, benchmark_path, log_path, filled
from workflow_lib.simulation.settings import simulation_settings


rule simulation_fit:
    output:
        SIMULATION_FIT,
    log:
        log_path("simulation/V{vocab}"),
    benchmark:
        benchmark_path("simulation/V{vocab}")
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
        "python -m workflow_lib.simulation.study fit --vocab-size {wildcards.vocab:q} --settings {params.settings:q} --threads {threads:q} --output {output:q} 2> {log:q}"


rule simulation_summary:
    input:
        fits=simulation_fits(config),
    output:
        csv=filled(SIMULATION, file="summary.csv"),
        markdown=report(
            filled(SIMULATION, file="summary.md"),
            caption="../report/simulation.rst",
            category="Simulation",
            labels={"output": "summary table"},
        ),
        png=report(
            filled(SIMULATION, file="figure.png"),
            caption="../report/simulation.rst",
            category="Simulation",
            labels={"output": "figure"},
        ),
        pdf=filled(SIMULATION, file="figure.pdf"),
        tests=filled(SIMULATION, file="tests.csv"),
        conclusions=report(
            filled(SIMULATION, file="conclusions.md"),
            caption="../report/simulation.rst",
            category="Simulation",
            labels={"output": "conclusions"},
        ),
    log:
        log_path("simulation/summary"),
    benchmark:
        benchmark_path("simulation/summary")
    localrule: True
    conda:
        "../envs/simulation.yaml"
    params:
        code=code_digest("workflow_lib.simulation.summary"),
        stem=lambda w, output: output.png.removesuffix(".png"),
    shell:
        "python -m workflow_lib.simulation.summary --inputs {input.fits:q} --csv {output.csv:q} --markdown {output.markdown:q} --figure {params.stem:q} --tests {output.tests:q} --conclusions {output.conclusions:q} 2> {log:q}"
