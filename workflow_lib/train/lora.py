"""LoRA training (`training.lora`, issue 55) through peft: the model's weights frozen, low-rank adapters trained.

The trainer calls `add_adapters` right after the model is built (before the optimizer, which then holds the adapters
alone), `save_adapter` for select_best's checkpoint, and `write_merged` at the end (`adapter/` and the merged model).
The adapters live inside the causal LM itself (peft injects them in place), so `forward.TargetLogits(lm)` and
accelerate's checkpoints work unchanged and a killed LoRA run resumes as a full one does. peft is imported inside
the functions: only a train job with `training.lora` set pays for it, and nothing read at the Snakefile's parse time
imports it. What it writes and what it costs: docs/usage.md, "LoRA".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflow_lib.cli import StageError

ADAPTER = "adapter"  # the adapters' folder inside the written model's (peft's save_pretrained)


def default_targets(model_type: str) -> list[str] | None:
    """peft's own per-family default target modules (gpt2: c_attn; opt, llama, gpt_neo: q_proj, v_proj; gpt_neox:
    query_key_value), or None for a family peft has no default for."""
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    found = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type)
    return list(found) if found is not None else None


def lora_config(lm: Any, lora: dict, model_key: str) -> Any:
    """The peft LoraConfig of `training.lora` for this model: the family's default targets where none are given
    (an error naming the key where peft has none), fan_in_fan_out for GPT-2's Conv1D layers (weights stored
    transposed: without it the merge would add B A transposed)."""
    from peft import LoraConfig
    from transformers.pytorch_utils import Conv1D

    model_type = lm.config.model_type
    targets = lora["target_modules"] or default_targets(model_type)
    if targets is None:
        raise StageError(
            f"models.{model_key}: training.lora.target_modules is not set and peft has no default for the model "
            f"type {model_type!r}; name the modules to adapt (e.g. its attention projections)"
        )
    return LoraConfig(
        task_type="CAUSAL_LM",
        r=lora["r"],
        lora_alpha=lora["alpha"],
        lora_dropout=lora["dropout"],
        target_modules=sorted(targets),
        fan_in_fan_out=any(isinstance(module, Conv1D) for module in lm.modules()),
        bias="none",
    )


def add_adapters(lm: Any, settings: dict, model_key: str) -> Any:
    """Freeze `lm` and inject LoRA adapters into it in place; returns the PeftModel that owns them (merging and
    saving go through it). The adapters' initial weights come from the global RNG, seeded before the model was
    built, so a rerun starts from the same ones. Adapters of a float16 or bfloat16 model are kept in float32
    (peft's autocast_adapter_dtype): they are the master weights AdamW updates."""
    from peft import get_peft_model

    config = lora_config(lm, settings["lora"], model_key)
    try:
        adapted = get_peft_model(lm, config)
    except ValueError as error:  # a target module the model lacks: peft names it
        raise StageError(f"models.{model_key}: training.lora.target_modules: {error}") from None
    # gradient_checkpointing needs nothing more: transformers 5 checkpoints non-reentrantly and makes the embeddings'
    # output require grad itself, so the frozen embeddings still pass the gradient on (tests/train/test_lora.py).
    return adapted


def described(adapted: Any) -> dict:
    """What the adapters are, resolved (the family's default targets spelt out): for the fingerprint, so that a
    checkpoint is resumed only by a run with the same adapters, and for train_summary.json."""
    config = adapted.peft_config["default"]
    trainable = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    return {
        "r": config.r,
        "alpha": config.lora_alpha,
        "dropout": config.lora_dropout,
        "target_modules": sorted(config.target_modules),
        "fan_in_fan_out": config.fan_in_fan_out,
        "trainable_parameters": trainable,
        "parameters": sum(p.numel() for p in adapted.parameters()),
    }


def save_adapter(adapted: Any, folder: Path) -> None:
    """The adapters alone (adapter_config.json, adapter_model.safetensors) into `folder`."""
    adapted.save_pretrained(str(folder), safe_serialization=True)


def load_adapter(adapted: Any, folder: Path) -> None:
    """Put the adapter weights saved in `folder` back into the model (select_best's best step)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    loaded: Any = set_peft_model_state_dict(adapted, load_file(str(folder / "adapter_model.safetensors")))
    missing = loaded.missing_keys  # the base's keys, and any adapter the file lacks
    if any("lora_" in key for key in missing):
        raise StageError(f"the best checkpoint's adapters in {folder} lack {sorted(missing)[:3]}")


def write_merged(adapted: Any, folder: Path, best: Path | None) -> Any:
    """Into `folder`: the adapters (`adapter/`) and the model with them merged (safetensors); with `best`, the
    adapters saved there (select_best) instead of the last step's. Returns the merged LM. The merge changes the model
    in place: the last thing a run does."""
    if best is not None:
        load_adapter(adapted, best)
    save_adapter(adapted, folder / ADAPTER)
    merged = adapted.merge_and_unload()
    merged.save_pretrained(folder, safe_serialization=True)
    return merged
