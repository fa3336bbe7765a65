"""The sampling stage (rules/sample.smk): continuations of every prompt, with the prefix perturbed afresh at every step.

- `sampler`: the `sample` rule's command line: model loading, batching of (prompt, run) rows, Parquet output.
- `steps`: what every mode shares: the `Batch` of rows to continue, the `Steps` a mode provides (a step's logits,
  feeding a drawn token) and `sample`, the one sampling loop (checks, suppression, keyed draws).
- `loops`: the modes' `Steps`: `Recompute` (`exact`: Algorithm 2 as written, the whole prefix recomputed),
  `Cached` (`cached`), and `Ancestral` (cached ancestral sampling at intensity 0); the batch layout they share.
- `reuse`: `exact` as the sampler runs it: `Reuse`, the unperturbed key/value cache reused up to each row's first
  edit (the same laws; `loops.Recompute` where reuse is not exact, `exact_steps` chooses).
- `embedded`: the modes of a strategy of the embedding space: `NoisedRecompute` (`exact`) and `NoisedCached`
  (`cached`), the prefix's input embeddings noised where the perturbation selects.
- `shards`: which rows a sampling shard continues, and how many shards an evaluation has (standard library only).
- `gather`: the `gather_samples` rule's command: the shards joined into the samples file.
- `settings`: what a sampling job reads from the config.
- `decoding`: keyed draws, the decoders (temperature, top-k, top-p, typical) and the checks on logits.
"""
