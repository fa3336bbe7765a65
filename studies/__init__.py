"""The studies a user runs by name, outside the workflow's package (no job imports them): `make run`
(`python -m studies.default`: the default study, its jobs warm), `make rehearsal`
(`python -m studies.rehearsal`: the paper's study on stand-ins) and `make real` (`python -m studies.real`: a real
pretrained model, offline), each with its post-run checks; what they share (`served`: a loopback HTTP server while
snakemake runs, the report, the checks; `warm`: the job server their jobs of one thread may run in).
"""
