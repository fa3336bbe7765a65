"""The sampling stage (rules/sample.smk): continuations of every prompt, with the prefix perturbed afresh at every step.

- `sampler`: the `sample` rule's command line: model loading, batching of (prompt, run) rows, Parquet output.
- `loops`: the sampling loops: `exact` (Algorithm 2 as written, the whole prefix recomputed), `cached`, and cached
  ancestral sampling at intensity 0.
- `reuse`: `exact` as the sampler runs it: the unperturbed key/value cache reused up to each row's first edit (the
  same laws; `loops.sample_exact` where reuse is not exact).
- `shards`: which rows a sampling shard continues, and how many shards an evaluation has (standard library only).
- `gather`: the `gather_samples` rule's command: the shards joined into the samples file.
- `settings`: what a sampling job reads from the config.
- `decoding`: keyed draws, the decoders (temperature, top-k, top-p, typical) and the checks on logits.
"""
