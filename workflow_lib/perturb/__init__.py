"""The perturbation stage (rules/perturb.smk) and the perturber T(.|X) that training, sampling and the simulation share.

- `perturber`: T itself: insertion, replacement or deletion of synonyms in ragged token-id batches (the
  `STRATEGIES` registry), and the prefix-mode targets.
- `strategies`: the registry of strategies (what each does to a selected token, or to its embedding).
- `embedding`: the embedding space's perturbation: its noise (keyed at sampling, torch's generator at training),
  where it is added, and NEFTune through transformers' hook.
- `backends`: the array operations T needs on numpy and on torch, and counter-based (keyed) randomness.
- `synonym_table`: the token -> synonyms table in the CSR layout that vectorised sampling needs.
- `synonyms`: the `synonyms` rule: building a table (embedding, distributional, uniform, oracle, and the
  `-words` sources on the tokens that spell a whole word).
- `synonym_file`: the `file` source: the user's pairs (synonyms.file) read onto a tokenizer, with their errors.
- `training_data`: the `perturbed_data` rule: perturbed training rows (augment or prefix mode).
- `realised`: the realised share of perturbed positions beside the nominal intensity, and the rule that stops a job
  whose perturbation did not happen.
"""
