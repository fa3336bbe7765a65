"""The cost model of a LoRA training (workflow_lib/cost/training.py) and the 7B example (configs/examples/lora-7b.yaml)."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from support.workflow_runs import REPO
from workflow_lib.cost import jobs as cost_jobs
from workflow_lib.cost import training
from workflow_lib.cost.devices import DEVICES
from workflow_lib.cost.estimate import load_config, memory_flags
from workflow_lib.cost.shapes import KNOWN, from_config

LLAMA_7B = from_config(KNOWN["meta-llama/Llama-2-7b-hf"])
LORA = {"r": 16, "alpha": 32.0, "dropout": 0.0, "target_modules": None}
OVERLAY = [str(REPO / "configs/paper.yaml"), str(REPO / "configs/examples/lora-7b.yaml")]  # whatever the cwd


@pytest.mark.parametrize("family", ["gpt2", "opt", "gpt-neox"])
def test_default_adapter_count_is_peft_s(family, tmp_path):
    """4 r d a layer for peft's default targets, against peft's own count on the family's checkpoint (no
    grouped-query attention in these three: exact)."""
    from transformers import AutoModelForCausalLM

    from studies.families import make_checkpoint
    from workflow_lib.train import lora

    folder = make_checkpoint(tmp_path, family, [" the cat sat on the mat ."] * 30)
    lm = AutoModelForCausalLM.from_pretrained(folder)
    adapted = lora.add_adapters(lm, {"lora": {**LORA, "r": 4}}, family)
    import json

    shape = from_config(json.loads((folder / "config.json").read_text()))
    assert training.adapter_params(shape, {**LORA, "r": 4}) == lora.described(adapted)["trainable_parameters"]
    named = {**LORA, "r": 4, "target_modules": lora.described(adapted)["target_modules"]}  # the same, by name
    assert training.adapter_params(shape, named) == lora.described(adapted)["trainable_parameters"]


def test_lora_drops_the_frozen_weights_gradient_gemms():
    """Full: 6N + 12 L d T; LoRA: 4N + 6A + 12 L d T (a third of the matmul FLOPs gone, attention's kept)."""
    n, attention = LLAMA_7B.matmul_params, 12 * LLAMA_7B.n_layer * LLAMA_7B.d_model * 256
    adapters = training.adapter_params(LLAMA_7B, LORA)
    assert adapters == 32 * 4 * 16 * 4096
    assert training.flops_per_token(LLAMA_7B, 256, None) == 6 * n + attention
    assert training.flops_per_token(LLAMA_7B, 256, LORA) == 4 * n + 6 * adapters + attention
    assert 0.66 < training.flops_per_token(LLAMA_7B, 256, LORA) / training.flops_per_token(LLAMA_7B, 256, None) < 0.7


def test_lora_memory_is_the_frozen_weights_in_their_dtype_plus_the_adapters_states():
    settings = {"lora": LORA, "gradient_checkpointing": True}
    spec = {"source": "hf", "load_dtype": "bfloat16"}
    held, what = training.memory(LLAMA_7B, settings, spec, 8 * 256, 2)
    activations = training.activation_bytes(LLAMA_7B, 8 * 256, 2, True)
    assert held == LLAMA_7B.params * 2 + training.adapter_params(LLAMA_7B, LORA) * 16 + activations
    assert "frozen weights (bfloat16)" in what
    full, _ = training.memory(LLAMA_7B, {**settings, "lora": None}, spec, 8 * 256, 2)
    assert full == LLAMA_7B.params * 16 + activations
    in_float32, _ = training.memory(LLAMA_7B, settings, {**spec, "load_dtype": "float32"}, 8 * 256, 2)
    assert in_float32 - held == LLAMA_7B.params * 2
    # checkpointing keeps each layer's input, not its 34 d of activations a token
    assert training.activation_bytes(LLAMA_7B, 2048, 2, False) > 5 * training.activation_bytes(LLAMA_7B, 2048, 2, True)


def test_the_7b_example_fits_80_gb_with_lora_and_not_without():
    config = load_config(OVERLAY, REPO)
    gpu = DEVICES["a100-80gb"]
    planned = [j for j in cost_jobs.plan_jobs(config, gpu, DEVICES["cpu"], None) if j.model == "llama-2-7b"]
    trains = [j for j in planned if j.rule == "train"]
    assert len(trains) == 2 and all(12 < j.memory_gb < 20 for j in trains), [j.memory_gb for j in trains]
    assert memory_flags(planned, gpu) == []
    full = copy.deepcopy(config)
    full["models"]["llama-2-7b"]["training"]["lora"] = None
    unadapted = [j for j in cost_jobs.plan_jobs(full, gpu, DEVICES["cpu"], None) if j.model == "llama-2-7b"]
    flags = memory_flags(unadapted, gpu)
    assert len(flags) == 1 and flags[0].startswith("train llama-2-7b: weights, gradients and AdamW states"), flags
    full_train = [j for j in unadapted if j.rule == "train"]
    assert all(j.memory_gb > 100 for j in full_train)
    assert sum(j.flops for j in trains) / sum(j.flops for j in full_train) == pytest.approx(0.68, abs=0.02)


def test_make_estimate_prints_the_7b_example_s_gpu_hours(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "workflow_lib.cost.estimate", "--configfile", *OVERLAY, "--device", "a100-80gb"]
        + ["--gpus", "1", "--cpu", "cpu", "--results", str(tmp_path / "results"), "--output", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "| train | 58 | GPU |" in done.stdout, done.stdout  # the paper's 56 and the 7B's two
    assert "GPU total:" in done.stdout and "GPU-hours" in done.stdout
    assert "Memory: every job's static memory fits." in done.stdout, done.stdout
