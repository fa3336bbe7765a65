"""The sampling stage (rules/sample.smk): continuations of every prompt, with the prefix perturbed afresh at every step.

- `sampler`: the `sample` rule's command line: model loading, batching of (prompt, run) rows, Parquet output.
- `loops`: the sampling loops: `exact` (Algorithm 2 as written), `cached`, and cached ancestral sampling at
  intensity 0.
- `decoding`: keyed draws, the decoders (temperature, top-k, top-p, typical) and the checks on logits.
"""
