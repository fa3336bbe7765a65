"""The training stage (rules/train.smk): one model trained with one objective on (perturbed) token blocks.

- `trainer`: the `train` rule's command line and loop (accelerate: devices, precision, accumulation, exact
  resume, validation, divergence checks).
- `batches`: the training rows as a torch Dataset, padding, and the epoch shuffle a resumed run repeats.
- `objectives`: the registry of training objectives (MLE, Brier, spherical, MixCE, TVD, EMO, ...).
"""
