"""The evaluation stage (rules/evaluate.smk): what each set of samples is worth.

`features` runs the `features` and `sample_features` rules (MAUVE's featuriser over human, control and model texts),
`metrics` the `evaluate` rule (MAUVE against cached human features, ROUGE, distinct-n), `controls` the
`control_texts` rule (degradations of the eval set's human text, one builder each in `control_builders`),
`control_scores` the `mauve_controls` rule (the controls' MAUVE and whether MAUVE is reported), `perplexity` and
`extrapolation` their rules (the human references' NLL; the exact TV to the true law on the builtin corpus). `floor`
is the fewest texts per side of a reported MAUVE, `textstats` the text statistics (distinct-n, repetition) on token
arrays. docs/method.md §4; docs/usage.md, "Sampling and evaluation".
"""
