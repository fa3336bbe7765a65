"""The training stage (rules/train.smk): one model trained with one objective on (perturbed) token blocks.

- `trainer`: the `train` rule's command line and `train()`, which reads as its steps: set up, resume, the loop,
  finish (accelerate: devices, precision, accumulation, exact resume, validation, divergence checks).
- `loop`: the loop's parts: one optimizer step, its log row, validation, and the written model.
- `checkpoints`: the checkpoint folder: the fingerprint (settings and the data's sha256), saving (flushed to disk,
  marked complete last, the previous one kept), choosing the checkpoint to resume (a damaged one falls back to the
  previous), clearing what a killed run left, and the lock that keeps a second trainer off the folder.
- `forward`: the step's forward, `TargetLogits`: the logits at the target positions only, with the embedding
  space's noise where the data lists it.
- `batches`: the training rows as a torch Dataset, padding, and the epoch shuffle a resumed run repeats.
- `lora`: training.lora through peft: adapters added after the model is built, the merged model and `adapter/`
  written at the end.
- `objectives`: the registry of training objectives (MLE, Brier, spherical, MixCE, TVD, EMO, ...).
"""
