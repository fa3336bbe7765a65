"""The training stage (rules/train.smk): one model trained with one objective on (perturbed) token blocks.

- `trainer`: the `train` rule's command line and `train()`, which reads as its steps: set up, resume, the loop,
  finish (accelerate: devices, precision, accumulation, exact resume, validation, divergence checks).
- `loop`: the loop's parts: one optimizer step, its log row, validation, and the checkpoint (each folder
  self-contained and marked complete last, so a kill at any moment resumes from a consistent one).
- `forward`: the step's forward, `TargetLogits`: the logits at the target positions only, with the embedding
  space's noise where the data lists it.
- `batches`: the training rows as a torch Dataset, padding, and the epoch shuffle a resumed run repeats.
- `lora`: training.lora through peft: adapters added after the model is built, the merged model and `adapter/`
  written at the end.
- `objectives`: the registry of training objectives (MLE, Brier, spherical, MixCE, TVD, EMO, ...).
"""
