"""The importer's own step: perturbed-LM's simulation summary (one row per vocabulary size, arm and intensity) read as
any table, reduced to the rows per vocabulary size, to show that a rule of the importing workflow consumes the
module's output by its rule's name (rules.plm_simulation_summary.output.csv)."""

import csv
from collections import Counter

snakemake = globals()["snakemake"]  # given by Snakemake's script directive

with open(snakemake.input.summary, newline="") as handle:
    rows = list(csv.DictReader(handle))
counts = Counter(row["vocab_size"] for row in rows)
with open(snakemake.output[0], "w") as out:
    out.write("vocab_size\trows\n")
    out.writelines(f"{size}\t{count}\n" for size, count in sorted(counts.items()))
with open(snakemake.log[0], "w") as log:
    log.write(f"{len(rows)} rows of {snakemake.input.summary}\n")
