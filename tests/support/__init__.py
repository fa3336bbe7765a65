"""Helpers that several test folders share: tiny checkpoints of each model family, a loopback HTTP server,
snakemake's job table, a reference perturber, and the tiny study the workflow tests run."""
