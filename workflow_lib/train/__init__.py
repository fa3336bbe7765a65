"""The training stage (rules/train.smk): one model trained with one objective on (perturbed) token blocks.

`trainer` is the `train` rule's command line and `train()`, which reads as its steps (set up, resume, the loop,
finish; accelerate for devices, precision, accumulation and exact resume); `loop` the loop's parts (a step, its log
row, validation, the written model); `checkpoints` the checkpoint folder (fingerprint, saving, choosing, the lock);
`forward` the step's logits at the target positions only (`TargetLogits`, with the embedding space's noise);
`batches` the rows as a Dataset, padding and the epoch shuffle a resumed run repeats; `lora` training.lora through
peft; `objectives` the registry of losses. docs/usage.md, "Training"; docs/method.md §2 and §3.
"""
