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
        return AutoModelForCausalLM.from_pretrained(
            spec["name"], revision=spec.get("revision"), dtype=load_dtype(spec), **kwargs
        )
    except Exception as error:
        first = str(error).splitlines()[0] if str(error) else ""
        raise StageError(
            f"models.{key}.name: could not load model {spec['name']!r}: {type(error).__name__}: "
            f"{first}\n{LOCAL_MODEL_HELP}"
        ) from error


def load_input_embeddings(spec: dict) -> np.ndarray:
    """The input embedding matrix [V, d] of a pretrained model (spec: a `models` entry plus its `key`)."""
    key = spec.get("key", "<model>")
    if spec["source"] != "hf":
        raise StageError(
            f"models.{key}: embedding synonyms need a pretrained (source: hf) model, not {spec['source']!r}"
        )
    model = load_pretrained(key, spec)
    return model.get_input_embeddings().weight.detach().float().numpy()


def gelu_new_in_place(x):
    """transformers' NewGELUActivation (`gelu_new`, GPT-2's and GPT-Neo's activation),
    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), as the same float operations in the same order,
    written in place: two buffers instead of seven, so about twice as fast on a CPU and bit for bit the same
    (each product or sum only has its operands swapped, which IEEE arithmetic leaves exact)."""
    import math

    import torch

    inner = torch.pow(x, 3.0)
    inner.mul_(0.044715).add_(x).mul_(math.sqrt(2.0 / math.pi)).tanh_().add_(1.0)
    return (x * 0.5).mul_(inner)


def use_in_place_activations(model):
    """Inference only: every NewGELUActivation of `model` computes `gelu_new_in_place` when no gradient is
    recorded (a forward under autograd keeps transformers' own, whose backward training uses). Returns the model."""
    import torch
    from transformers.activations import NewGELUActivation

    for module in model.modules():
        if isinstance(module, NewGELUActivation):
            recorded = module.forward

            def forward(x, recorded=recorded):
                return recorded(x) if torch.is_grad_enabled() and x.requires_grad else gelu_new_in_place(x)

            module.forward = forward
    return model
