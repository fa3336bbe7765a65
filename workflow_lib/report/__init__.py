"""The report stage (rules/report.smk): every result file of a study -> tables, figures, comparisons and a summary.

- `build`: the command line of the `collect_metrics`, `tables`, `figure`, `examples` and `training_curves` rules, and
  the HTML report's first page (the description with the findings).
- `collect`: the tidy table of every metrics, extrapolation and perplexity file.
- `conditions`: a result path's condition, and the frames that the tables and figures share.
- `contrasts`: the `contrasts` rule: paired comparisons of conditions, Holm-corrected, and the designed MAUVE pairs.
- `joint_mauve`: the `mauve_contrast` rule: one MAUVE contrast on a quantisation shared by both conditions and the
  human text, with its permutation p.
- `seeds`: training seeds as the unit of a method comparison (the contrasts across seeds), and a condition's seeds
  pooled into one row for the tables and figures.
- `paired_tables`: the summary's "Paired comparisons" section, written from `contrasts.csv`.
- `statistics`: the paired permutation test over prompts, the t intervals, the test across seeds, what a test could
  have seen (80% power), the rank agreement and Holm, on arrays.
- `resolution`: which MAUVE cells may be shown, compared and found on (the rest read "too few texts (n)" or
  "MAUVE cannot see ...").
- `synonym_audit`: the `synonym_audit` rule: each synonym table's seeded sample of sources with their synonyms as
  text, and the share of the training tokens with a synonym (tables/synonyms.md, a section of the summary).
- `instrument`: "What MAUVE can see here": the controls of every eval set as a table and a summary section.
- `findings`: the summary's opening "What this study found", generated from the numbers.
- `tables`: Table 1 and the other tables (CSV, Markdown, LaTeX), and the comparison with the paper.
- `summary`: results/summary.md: provenance, data records and the tables.
- `figures`: the study's figures (ablation, intensity, extrapolation, training curves).
"""
