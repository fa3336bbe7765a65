"""The report stage (rules/report.smk): every result file of a study -> tables, figures, comparisons and a summary.

Each module's docstring names the rule or summary section it serves. `build` holds the command line of the
collect_metrics, tables, figure, examples and training_curves rules and the HTML report's first page; `collect`
the tidy table; `contrasts`, `joint_mauve`, `seeds` and `statistics` the paired comparisons and their tests;
`resolution` and `instrument` which MAUVE cells may be shown and why; `findings`, `summary`, `tables` and `figures`
what the study writes. Which file each rule writes: docs/development.md, "The data flow, one line per stage"; what each holds:
docs/output.md.
"""
