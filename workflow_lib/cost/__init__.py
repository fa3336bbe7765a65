"""What a study will cost before it runs: FLOPs and device-hours per job, memory fit, SLURM requests.

`devices` holds the GPU table and the assumed utilisations, `shapes` a model's size and shape, `sizes` how many
tokens and prompts each job reads, `jobs` the per-job arithmetic (`training` a training's FLOPs a token and memory, full or LoRA), `calibrate` the measurement of this machine and
`estimate` the command line (`make estimate`). Standard library only at import (rules/common.smk imports `jobs`
at parse time to size SLURM requests); torch is imported by `calibrate` alone.
"""
