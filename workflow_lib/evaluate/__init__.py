"""The evaluation stage (rules/evaluate.smk): what each set of samples is worth.

- `metrics`: the `features` and `evaluate` rules: MAUVE against cached human features, ROUGE, distinct-n.
- `textstats`: distinct-n and repetition on token arrays.
- `perplexity`: the `perplexity` rule: per-prompt NLL of the human references.
- `extrapolation`: the `extrapolation` rule: exact TV to the true next-word law on the builtin corpus.
"""
