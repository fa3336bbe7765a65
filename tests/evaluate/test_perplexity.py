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

TEXTS = [
    f"the {a} {v} the {b} near the river and then went home"
    for a in ("cat", "dog", "fox", "cow")
    for v in ("saw", "met", "heard")
    for b in ("goat", "duck", "bird")
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from studies.families import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("hub"), "gpt2", TEXTS)


def write_prompts(path, references: list[str]) -> None:
    pq.write_table(
        pa.table(
            {
                "prompt_id": pa.array(range(7, 7 + len(references)), pa.int32()),
                "prefix": [r[:10] for r in references],
                "reference": references,
            }
        ),
        path,
    )


def run_cli(model, eval_sets: dict[str, list[str]], folder, settings: dict) -> dict[str, tuple[dict, pa.Table]]:
    """The CLI on one or more eval sets (name -> references); {eval set: (summary, per-prompt table)}."""
    for name, references in eval_sets.items():
        write_prompts(folder / f"{name}-prompts.parquet", references)
    out = folder / "ppl"
    argv = [
        "perplexity",
        "--model",
        str(model),
        "--prompts",
        *[f"{n}={folder / f'{n}-prompts.parquet'}" for n in eval_sets],
        "--settings",
        json.dumps(settings),
        "--output-dir",
        str(out),
    ]
    saved, sys.argv = sys.argv, argv
    try:
        perplexity.main()
    finally:
        sys.argv = saved
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}{ext}" for n in eval_sets for ext in (".json", ".prompts.parquet")
    )
    return {
        n: (json.loads((out / f"{n}.json").read_text()), pq.read_table(out / f"{n}.prompts.parquet")) for n in eval_sets
    }


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
    result, per_prompt = run_cli(checkpoint, {"wiki": references}, tmp_path, {"batch_size": 3, "seed": 1})["wiki"]
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
        run_cli(tmp_path / "broken", {"wiki": TEXTS[:2]}, tmp_path, {"seed": 1})
    assert not (tmp_path / "ppl").exists()


def test_one_job_scores_each_eval_set_as_if_alone(checkpoint, tmp_path):
    """The model is loaded once for several eval sets; each one's files equal those of a job that scores it alone."""
    sets = {"webtext": TEXTS[:6], "wikitext2": TEXTS[6:15]}
    (tmp_path / "both").mkdir()
    both = run_cli(checkpoint, sets, tmp_path / "both", {"batch_size": 4, "seed": 1})
    for name, references in sets.items():
        (tmp_path / name).mkdir()
        alone = run_cli(checkpoint, {name: references}, tmp_path / name, {"batch_size": 4, "seed": 1})[name]
        assert both[name][0] == alone[0] and both[name][1].equals(alone[1])
    assert both["webtext"][0]["prompts"] == 6 and both["wikitext2"][0]["prompts"] == 9


def test_a_failing_eval_set_leaves_no_output_and_a_bad_argument_is_named(checkpoint, tmp_path):
    write_prompts(tmp_path / "empty.parquet", ["a"])  # a single token: nothing to score
    write_prompts(tmp_path / "ok.parquet", TEXTS[:3])
    out = tmp_path / "ppl"
    for prompts, match in (
        ([f"ok={tmp_path / 'ok.parquet'}", f"empty={tmp_path / 'empty.parquet'}"], "no reference of two"),
        ([str(tmp_path / "ok.parquet")], "EVAL_SET=PROMPTS.parquet"),
        ([f"ok={tmp_path / 'ok.parquet'}", f"ok={tmp_path / 'ok.parquet'}"], "given twice"),
    ):
        argv = [
            "perplexity",
            "--model",
            str(checkpoint),
            "--prompts",
            *prompts,
            "--settings",
            '{"seed": 1}',
            "--output-dir",
            str(out),
        ]
        saved, sys.argv = sys.argv, argv
        try:
            with pytest.raises(StageError, match=match):
                perplexity.main()
        finally:
            sys.argv = saved
        assert not out.exists()
