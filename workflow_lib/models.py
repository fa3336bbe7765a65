"""Loading models: a pretrained one from the hub (or a local folder), or a GPT-2 architecture from scratch."""

from __future__ import annotations

import numpy as np

from workflow_lib.cli import StageError

LOCAL_MODEL_HELP = (
    "Without network access, set `name` to a local folder that holds the model "
    "(e.g. one written by `AutoModelForCausalLM.from_pretrained(...).save_pretrained(folder)`)."
)


def load_pretrained(key: str, spec: dict, **kwargs):
    """A hub causal LM by id or local folder; offline, a clear error that names the model key."""
    from transformers import AutoModelForCausalLM

    from workflow_lib.hub import hub_unreachable

    if why := hub_unreachable(spec["name"]):
        raise StageError(f"models.{key}.name: could not load model {spec['name']!r}: {why}\n{LOCAL_MODEL_HELP}")
    try:
        return AutoModelForCausalLM.from_pretrained(spec["name"], revision=spec.get("revision"), **kwargs)
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
