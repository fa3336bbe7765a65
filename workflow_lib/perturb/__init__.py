"""The perturbation stage (rules/perturb.smk) and the perturber T(.|X) that training, sampling and the simulation share.

`perturber` is T itself on ragged token-id batches (and the prefix-mode targets), `strategies` the registry of what
each strategy does to a selected token or its embedding, `embedding` the embedding space's noise (and NEFTune),
`backends` the array operations on numpy and torch and the keyed randomness. `synonym_table` is the CSR table of
synonyms, `synonyms` the `synonyms` rule that builds one, `synonym_file` the user's pairs (`file`). `training_data`
is the perturbed training rows (augment or prefix mode), `realised` the realised share beside the nominal intensity
and the rule that stops a job whose perturbation did not happen. docs/method.md §1; docs/usage.md, "The
perturbation".
"""
