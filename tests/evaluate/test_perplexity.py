"""Perplexity of a tiny GPT-2 on reference texts: the CLI against the model's own `labels=` loss."""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workflow_lib.cli import StageError
from workflow_lib.evaluate import perplexity

TEXTS = [f"the {a} {v} the {b} near the river and then went home" for a in ("cat", "dog", "fox", "cow")
         for v in ("saw", "met", "heard") for b in ("goat", "duck", "bird")]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from support.families import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("hub"), "gpt2", TEXTS)


def run_cli(model, references: list[str], folder, settings: dict) -> tuple[dict, pa.Table]:
    pq.write_table(pa.table({"prompt_id": pa.array(range(7, 7 + len(references)), pa.int32()),
                             "prefix": [r[:10] for r in references], "reference": references}), folder / "prompts.parquet")
    argv = ["perplexity", "--model", str(model), "--prompts", str(folder / "prompts.parquet"), "--settings",
            json.dumps(settings), "--output", str(folder / "ppl.json"), "--per-prompt", str(folder / "ppl.parquet")]
    saved, sys.argv = sys.argv, argv
    try:
        perplexity.main()
    finally:
        sys.argv = saved
    return json.loads((folder / "ppl.json").read_text()), pq.read_table(folder / "ppl.parquet")


def labels_loss(model_path, references: list[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Summed NLL and scored tokens per reference, one unpadded forward pass each, from the model's own loss."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    nll, tokens = [], []
    for text in references:
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"][:max_len]])
        with torch.no_grad():
            loss = model(ids, labels=ids).loss  # mean over the ids.shape[1] - 1 shifted targets
        nll.append(float(loss) * (ids.shape[1] - 1))
        tokens.append(ids.shape[1] - 1)
    return np.array(nll), np.array(tokens)


def test_perplexity_matches_the_models_own_loss(checkpoint, tmp_path):
    # lengths differ, so batches are padded; the last reference is longer than the 128-position context
    references = TEXTS[:5] + [TEXTS[5] + " and the dog ran"] + [" ".join(TEXTS[:12])]
    result, per_prompt = run_cli(checkpoint, references, tmp_path, {"batch_size": 3, "seed": 1})
    nll, tokens = labels_loss(checkpoint, references, max_len=128)
    assert tokens[-1] == 127  # truncated to the context, first token unscored
    assert per_prompt.column_names == ["prompt_id", "nll", "tokens"]
    assert [str(t) for t in per_prompt.schema.types] == ["int64", "double", "int64"]
    assert per_prompt["prompt_id"].to_pylist() == list(range(7, 14))
    assert per_prompt["tokens"].to_pylist() == tokens.tolist()
    assert per_prompt["nll"].to_numpy() == pytest.approx(nll, rel=1e-5)
    assert result["tokens"] == tokens.sum() and result["prompts"] == 7
    assert result["nll_per_token"] == pytest.approx(nll.sum() / tokens.sum(), rel=1e-5)
    assert result["perplexity"] == pytest.approx(np.exp(nll.sum() / tokens.sum()), rel=1e-5)
    assert len(result["provenance"]["settings_sha256"]) == 64


def test_a_model_with_a_nan_weight_is_refused(checkpoint, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight[0, 0] = float("nan")
    model.save_pretrained(tmp_path / "broken")
    AutoTokenizer.from_pretrained(checkpoint).save_pretrained(tmp_path / "broken")
    with pytest.raises(StageError, match="not finite"):
        run_cli(tmp_path / "broken", TEXTS[:2], tmp_path, {"seed": 1})
    assert not (tmp_path / "ppl.json").exists()
