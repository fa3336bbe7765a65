"""What the tests, the benchmarks and `make rehearsal` / `make real` share, outside the package: tiny checkpoints of
each model family saved as the hub saves them, a GGUF file, a loopback HTTP server, a reference perturber,
snakemake's job table, the snakemake helper the workflow tests run (`workflow_runs`), and the drivers of the
rehearsal and the real-model study. Nothing in workflow_lib imports it.
"""
