"""NEFTune's rows say whether its noise was in its design range (report.design_range, perturb.embedding)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from workflow_lib.perturb.embedding import neftune_scale
from workflow_lib.report.design_range import neftune_lines


def test_the_scale_is_alpha_over_sqrt_3_l_d_against_the_embeddings_rms():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=64, vocab_size=100, n_positions=128))
    record = neftune_scale(model, 5.0, 128)
    rms = model.get_input_embeddings().weight.pow(2).mean().sqrt().item()
    assert record["noise_rms"] == pytest.approx(5.0 / (3 * 128 * 64) ** 0.5)
    assert record["ratio"] == pytest.approx(record["noise_rms"] / rms)
    assert 1.4 < record["ratio"] < 1.8  # the default study's alpha 5 on a 64-wide model at GPT-2's init (std 0.02)
    assert 0.05 < neftune_scale(model, 1.0, 128)["ratio"] < 0.5


def write(folder, ratio, ratio_end):
    folder.mkdir()
    record = {"alpha": 5.0, "length": 128, "width": 64, "noise_rms": 0.03, "ratio": ratio, "ratio_end": ratio_end}
    (folder / "train_summary.json").write_text(json.dumps({"ran": {"neftune": record}}))


def test_lines_say_in_range_or_off_design(tmp_path):
    write(tmp_path / "a", 0.32, 0.11)
    write(tmp_path / "b", 1.6, 0.55)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "train_summary.json").write_text(json.dumps({"ran": {}}))
    lines = neftune_lines([str(tmp_path / n) for n in ("a", "b", "c", "missing")])
    assert len(lines) == 2
    assert "0.32x" in lines[0] and "0.11x" in lines[0] and "in NEFTune's design range (0.05-0.5)" in lines[0]
    assert "1.60x" in lines[1] and "off NEFTune's design range" in lines[1]
