"""The sampling stage (rules/sample.smk): continuations of every prompt, with the prefix perturbed afresh at every step.

`sampler` is the `sample` rule's command line (model loading, batching of (prompt, run) rows, Parquet output) and
`gather` the `gather_samples` rule's (shards joined). Every mode is a `steps.Steps` run by one loop, `steps.sample`:
`loops` holds `Recompute`, `Cached` and `Ancestral` (intensity 0), `reuse` `exact` as the sampler runs it (the
unperturbed cache reused up to each row's first edit), `embedded` the modes of an embedding-space strategy, and
`modes` their registry. `shards` says which rows a shard continues (standard library only), `decoding` holds the keyed
draws, the decoders and the checks on logits, `settings` what a job reads from the config. docs/usage.md, "Sampling
and evaluation".
"""
