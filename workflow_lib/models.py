"""Loading models: a pretrained one from the hub (or a local folder), or a GPT-2 architecture from scratch."""

from __future__ import annotations

import numpy as np

from workflow_lib.cli import StageError

LOCAL_MODEL_HELP = (
    "Without network access, set `name` to a local folder that holds the model "
    "(e.g. one written by `AutoModelForCausalLM.from_pretrained(...).save_pretrained(folder)`)."
)


def load_dtype(spec: dict):
    """The dtype to load a checkpoint in: float32 unless `load_dtype` asks otherwise.

    Hub checkpoints are saved in many dtypes (OPT-125M and Pythia in float16, Llamas in bfloat16) and
    transformers loads the checkpoint's own dtype by default. Those weights become the master weights that
    AdamW updates, and in float16 an update of lr 5e-5 underflows or overflows to NaN within steps."""
    import torch

    name = spec.get("load_dtype", "float32")
    return name if name == "auto" else getattr(torch, name)


def load_pretrained(key: str, spec: dict, **kwargs):
    """A hub causal LM by id or local folder, in `load_dtype` (float32 by default); offline, a clear error that
    names the model key."""
    from transformers import AutoModelForCausalLM

    from workflow_lib.hub import hub_unreachable

    if why := hub_unreachable(spec["name"]):
        raise StageError(f"models.{key}.name: could not load model {spec['name']!r}: {why}\n{LOCAL_MODEL_HELP}")
    try:
        return AutoModelForCausalLM.from_pretrained(spec["name"], revision=spec.get("revision"),
                                                    dtype=load_dtype(spec), **kwargs)
    except Exception as error:
        first = str(error).splitlines()[0] if str(error) else ""
        raise StageError(f"models.{key}.name: could not load model {spec['name']!r}: {type(error).__name__}: "
                         f"{first}\n{LOCAL_MODEL_HELP}") from error


def load_input_embeddings(spec: dict) -> np.ndarray:
    """The input embedding matrix [V, d] of a pretrained model (spec: a `models` entry plus its `key`)."""
    key = spec.get("key", "<model>")
    if spec["source"] != "hf":
        raise StageError(f"models.{key}: embedding synonyms need a pretrained (source: hf) model, not {spec['source']!r}")
    model = load_pretrained(key, spec)
    return model.get_input_embeddings().weight.detach().float().numpy()
