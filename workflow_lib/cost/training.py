"""A training job's FLOPs per token and memory, full fine-tuning or LoRA (`training.lora`): jobs.train_job's arithmetic.

Standard library only, as the whole cost model (it runs at the Snakefile's parse time): peft's per-family default
target modules are not read here, their adapters' size is (`adapter_params`).
"""

from __future__ import annotations

from workflow_lib.cost.shapes import Shape

ADAM_BYTES_PER_PARAM = 16  # fp32 weights, gradients and AdamW's two moments (mixed precision keeps fp32 masters)
LOAD_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 4}  # auto: the checkpoint's, unknown: the larger
# Activations kept for backward per token per layer, in units of d_model x (bytes of the precision / 2): 34 in
# 16-bit (Korthikanti et al. 2022, "Reducing Activation Recomputation", table 2: attention 11, MLP 19, norms 4),
# without the s^2 attention scores, which PyTorch's SDPA kernels do not keep.
ACTIVATION_UNITS = 34
LOGIT_BYTES = 8  # per target token per vocabulary entry: the float32 logits and their gradient (objectives.py)

# Each module name's (inputs, outputs) in units of d_model (d) or the FFN width (f), over the five families' names.
# GPT-2's c_proj is both the attention's (d -> d) and the MLP's (f -> d) output; an unknown name counts as d -> f.
_MODULES = {
    **dict.fromkeys(("q_proj", "k_proj", "v_proj", "o_proj", "out_proj", "dense", "query", "key", "value"), ("d", "d")),
    **dict.fromkeys(("c_attn", "query_key_value"), ("d", "3d")),
    **dict.fromkeys(("c_fc", "fc1", "fc_in", "up_proj", "gate_proj", "dense_h_to_4h"), ("d", "f")),
    **dict.fromkeys(("fc2", "fc_out", "down_proj", "dense_4h_to_h"), ("f", "d")),
}


def adapter_params(shape: Shape, lora: dict) -> int:
    """LoRA's trainable parameters: r (inputs + outputs) per adapted matrix, in every layer. peft's default targets
    of the five families (gpt2: c_attn, d -> 3d; opt, llama, gpt_neo: q_proj and v_proj, d -> d each; gpt_neox:
    query_key_value, d -> 3d) are all 4 r d a layer, which is what target_modules null counts (grouped-query
    attention's smaller v_proj is left out: an upper bound)."""
    size = {"d": shape.d_model, "3d": 3 * shape.d_model, "f": shape.d_ffn}
    names = lora["target_modules"]
    if not names:
        return shape.n_layer * 4 * lora["r"] * shape.d_model
    per_layer = 0
    for name in names:
        dims = [("d", "d"), ("f", "d")] if name == "c_proj" else [_MODULES.get(name.split(".")[-1], ("d", "f"))]
        per_layer += sum(lora["r"] * (size[a] + size[b]) for a, b in dims)
    return shape.n_layer * per_layer


def flops_per_token(shape: Shape, length: float, lora: dict | None) -> float:
    """Training FLOPs per token of a row of `length` tokens.

    Full fine-tuning: 6N + 12 L d T (PaLM appendix B): the forward 2N, the backward 4N, half of it the activations'
    gradients (dL/dx = dL/dy W^T) and half the weights' (dL/dW = x^T dL/dy); attention's 12 L d T has no weights.
    LoRA: the frozen weights need no gradient, so their weight-gradient GEMMs (2N, a third of the step's, half of
    the backward's) go, while the activations' gradients still flow through every layer down to the first adapter:
    4N + 12 L d T, plus the adapters' own 6A (A: adapter_params, small: 4 r d a layer against 12 d^2 or more)."""
    attention = 12 * shape.n_layer * shape.d_model * length
    if lora is None:
        return 6 * shape.matmul_params + attention
    return 4 * shape.matmul_params + 6 * adapter_params(shape, lora) + attention


def activation_bytes(shape: Shape, tokens: float, precision_bytes: int, checkpointing: bool) -> float:
    """Activations a micro-batch of `tokens` keeps for backward: every layer's (ACTIVATION_UNITS d per token in
    16-bit), or with gradient_checkpointing each layer's input and one layer's whole; plus the logits at the target
    positions (every token, an upper bound) and their gradient. The same with or without LoRA: the frozen layers'
    activations are still needed for the gradients that reach the adapters below them."""
    per_layer = ACTIVATION_UNITS * shape.d_model * tokens * precision_bytes / 2
    kept = (
        (shape.n_layer * shape.d_model * tokens * precision_bytes + per_layer)
        if checkpointing
        else (shape.n_layer * per_layer)
    )
    return kept + tokens * shape.vocab * LOGIT_BYTES


def memory(shape: Shape, settings: dict, model_spec: dict, tokens: float, precision_bytes: int) -> tuple[float, str]:
    """Bytes a training process holds on its GPU, and what they are.

    Full fine-tuning: 16 bytes per parameter (fp32 weights, gradients and AdamW's moments). LoRA: the frozen
    weights in the dtype they are loaded in (`load_dtype`: the trainer keeps them so; mixed precision only casts
    per operation) plus 16 bytes per adapter parameter (peft keeps the adapters in float32). Both plus the
    activations (`activation_bytes`)."""
    activations = activation_bytes(shape, tokens, precision_bytes, settings["gradient_checkpointing"])
    lora = settings.get("lora")
    if lora is None:
        states = shape.params * ADAM_BYTES_PER_PARAM
        what = "weights, gradients and AdamW states (16 bytes per parameter, on every GPU) and activations"
        return states + activations, what
    dtype = model_spec.get("load_dtype", "float32") if model_spec["source"] == "hf" else "float32"
    frozen = shape.params * LOAD_BYTES[dtype]
    adapters = adapter_params(shape, lora) * ADAM_BYTES_PER_PARAM
    what = (
        f"LoRA's frozen weights ({dtype}), its adapters' weights, gradients and AdamW states (r = {lora['r']}) "
        "and activations"
    )
    return frozen + adapters + activations, what
