"""The evaluation stage (rules/evaluate.smk): what each set of samples is worth.

- `features`: the `features` and `sample_features` rules: MAUVE's featuriser over human, control and model texts.
- `metrics`: the `evaluate` rule: MAUVE against cached human features, ROUGE, distinct-n.
- `controls`: the `control_texts` rule: MAUVE's control texts (degradations of the eval set's human text).
- `control_scores`: the `mauve_controls` rule: the controls' MAUVE, and the rule that decides whether MAUVE is
  reported.
- `floor`: the fewest texts per side of a reported MAUVE.
- `textstats`: distinct-n and repetition on token arrays.
- `perplexity`: the `perplexity` rule: per-prompt NLL of the human references.
- `extrapolation`: the `extrapolation` rule: exact TV to the true next-word law on the builtin corpus.
"""
