"""Sampling in shards: each shard is whole batches of the unsharded order, and the gathered samples are the
unsharded job's file byte for byte, for any number of shards (issue 35)."""

from __future__ import annotations

import itertools
import json
import sys

import numpy as np
import pyarrow as pa
import pytest

from workflow_lib.cli import StageError
from workflow_lib.files import read_parquet, write_parquet
from workflow_lib.perturb.realised import REALISED_KEY, SETTINGS_KEY, Realised
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.sample import gather, sampler
from workflow_lib.sample.shards import batch_ranges, batches_that_fit, shard_count, shard_rows

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py: tiny models on one thread

PROMPTS = [" the cat sat", " a dog", " the bird sang a song .", " the cat", " a dog ran in the park"]


def test_shards_are_whole_batches_covering_every_row_once():
    for rows in (1, 7, 15, 64, 65):
        for batch in (1, 4, 64):
            for count in (1, 2, 3, 5, 40):
                ranges = [shard_rows(rows, batch, i, count) for i in range(count)]
                assert ranges[0][0] == 0 and ranges[-1][1] == rows
                assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))  # contiguous, in order
                assert all(start % batch == 0 for start, _ in ranges)  # each starts a batch of the unsharded job
                sizes = [-(-(stop - start) // batch) for start, stop in ranges]
                assert max(sizes) - min(sizes) <= 1, (rows, batch, count, sizes)
                # shard_rows computes one shard alone: the same as batch_ranges' list
                expected = [
                    (min(a * batch, rows), min(b * batch, rows)) for a, b in batch_ranges(-(-rows // batch), count)
                ]
                assert ranges == expected
    assert batch_ranges(4, 3) == [(0, 1), (1, 2), (2, 4)]
    with pytest.raises(ValueError):
        batch_ranges(4, 0)
    for index, count in ((3, 3), (-1, 3), (0, 0)):
        with pytest.raises(ValueError):
            shard_rows(10, 2, index, count)


def test_an_evaluation_has_the_fewest_shards_of_at_most_shard_batches_batches():
    assert shard_count(100, 8, None) == 1  # null: one job per evaluation
    assert shard_count(100, 8, 13) == 1  # 13 batches (the last of 4 rows) in one
    assert shard_count(100, 8, 12) == 2 and shard_count(100, 8, 1) == 13
    assert shard_count(0, 8, 4) == 1
    for rows, batch, most in ((100, 8, 5), (97, 10, 3), (64, 64, 1), (1000, 7, 9)):
        count = shard_count(rows, batch, most)
        sizes = [stop - start for start, stop in batch_ranges(-(-rows // batch), count)]
        assert max(sizes) <= most and (count == 1 or sum(sizes) > most * (count - 1))  # one fewer would not hold them


def test_batches_that_fit_is_the_most_one_job_runs_within_a_limit():
    # batches of 60 s and 30 s to start
    assert batches_that_fit(60, 30, 630) == 10 and batches_that_fit(60, 30, 629) == 9
    assert batches_that_fit(60, 30, 90) == 1 and batches_that_fit(60, 30, 89) == 0


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny GPT-2 with its tokenizer, the prompts file and a synonym table, as the sample rule reads them."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from workflow_lib.data.tokenization import train_bpe

    root = tmp_path_factory.mktemp("shards")
    texts = [" the cat sat on the mat .", " a dog ran in the park .", " the bird sang a song ."] * 20
    tokenizer = train_bpe(texts, 280, min_frequency=1)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_layer=1, n_head=2, n_embd=16, n_positions=64))
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    write_parquet(pa.table({"prompt_id": list(range(100, 105)), "prefix": PROMPTS}), root / "prompts.parquet")
    table = SynonymTable.uniform(len(tokenizer), tokenizer.all_special_ids)
    write_parquet(table.to_arrow(), root / "synonyms.parquet")
    return root


def sample_shards(root, mode: str, count: int, monkeypatch, synonyms: str = "synonyms.parquet") -> list:
    """Runs the sample job's command for each of `count` shards (15 rows in batches of 4: 4 batches)."""
    settings = {"runs": 3, "new_tokens": 6, "batch_size": 4, "mode": mode, "precision": "fp32", "seed": 3}
    paths = []
    for index in range(count):
        path = root / mode / f"{index}-of-{count}.parquet"
        argv = [
            "sampler",
            *("--model", str(root / "model"), "--prompts", str(root / "prompts.parquet")),
            *("--synonyms", str(root / synonyms)),
            *("--perturbation", json.dumps({"strategy": "insertion", "intensity": 0.3})),
            *("--settings", json.dumps(settings), "--shard", f"{index}/{count}", "--output", str(path)),
        ]
        monkeypatch.setattr(sys, "argv", argv)
        sampler.main()
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("mode", ["exact", "cached"])
def test_gathered_samples_are_the_same_bytes_for_any_number_of_shards(checkpoint, mode, monkeypatch):
    gathered = {}
    for count in (1, 2, 3, 6):  # 3: uneven (1, 1 and 2 batches); 6: more shards than batches (two are empty)
        shards = sample_shards(checkpoint, mode, count, monkeypatch)
        out = checkpoint / f"{mode}-gathered-{count}.parquet"
        monkeypatch.setattr(sys, "argv", ["gather", "--shards", *shards, "--output", str(out)])
        gather.main()
        # as the rule gives them: the folder (which also holds other counts' shards) and the count
        by_folder = checkpoint / f"{mode}-by-folder-{count}.parquet"
        argv = ["gather", "--folder", str(checkpoint / mode), "--count", str(count), "--output", str(by_folder)]
        monkeypatch.setattr(sys, "argv", argv)
        gather.main()
        assert by_folder.read_bytes() == out.read_bytes()
        gathered[count] = out.read_bytes()
        rows = [read_parquet(path).num_rows for path in shards]
        assert sum(rows) == 15 and (count != 6 or rows.count(0) == 2), rows
    assert len(set(gathered.values())) == 1
    table = read_parquet(checkpoint / f"{mode}-gathered-3.parquet")
    assert table.num_rows == 15 and list(table.schema.metadata) == [REALISED_KEY]
    assert table.column("run").to_pylist() == [r for r in range(3) for _ in PROMPTS]  # run-major, as unsharded


def test_gather_refuses_shards_that_are_not_one_jobs_set_in_order(checkpoint, monkeypatch):
    shards = sample_shards(checkpoint, "exact", 3, monkeypatch)
    for wrong in ([shards[1], shards[0], shards[2]], shards[:2], [shards[0], shards[0], shards[2]]):
        with pytest.raises(StageError, match="shards of one job, in order"):
            gather.gather(wrong)
    with pytest.raises(StageError, match="not a sampling shard"):
        gather.gather([str(checkpoint / "prompts.parquet")])


def test_the_number_of_shards_is_not_a_setting_of_the_sampled_law():
    """A shard's command gets its place (`--shard i/n`) in its path's wildcards; the settings param, a rerun trigger
    of every shard, holds only what changes a sample."""
    from support.workflow_runs import tiny_config
    from workflow_lib.config import validate_config
    from workflow_lib.layout import SamplingCondition
    from workflow_lib.sample.settings import sampling_settings

    test = SamplingCondition("unbiased", "none", "none", "0", "exact")
    config = tiny_config()
    fixed = validate_config({**config, "sampling": {**config["sampling"], "shard_batches": 4}})
    assert sampling_settings(fixed, test) == sampling_settings(validate_config(tiny_config()), test)
    assert "shard_batches" not in sampling_settings(fixed, test) and fixed["sampling"]["shard_batches"] == 4


@pytest.mark.parametrize("mode", ["exact", "cached"])
def test_a_samples_file_records_its_realised_share_beside_the_nominal(checkpoint, mode, monkeypatch):
    """Every token has a synonym (the uniform table): the share of perturbable positions the sampler's perturbations
    selected, over all steps, is the nominal 0.3 within four binomial standard errors; the gathered file adds up
    its shards' counts."""
    shards = sample_shards(checkpoint, mode, 2, monkeypatch)
    parts = [Realised.from_dict(json.loads(read_parquet(p).schema.metadata[REALISED_KEY])) for p in shards]
    out = checkpoint / f"{mode}-realised.parquet"
    monkeypatch.setattr(sys, "argv", ["gather", "--shards", *shards, "--output", str(out)])
    gather.main()
    total = Realised.from_dict(json.loads(read_parquet(out).schema.metadata[REALISED_KEY]))
    assert total == parts[0] + parts[1] and total.nominal == 0.3
    assert total.eligible == total.perturbable > 15 * 6  # every step (exact) or every token once (cached)
    assert abs(total.share - 0.3) < 4 * np.sqrt(0.3 * 0.7 / total.perturbable)


def test_a_sampling_job_that_realises_nothing_stops_naming_the_synonym_settings(checkpoint, monkeypatch):
    empty = SynonymTable.from_rows(SynonymTable.from_arrow(read_parquet(checkpoint / "synonyms.parquet")).vocab_size,
                                   [], [], []).to_arrow()  # fmt: skip
    settings = {"source": "distributional", "k": 10, "min_count": 10**6}
    metadata = {**empty.schema.metadata, SETTINGS_KEY: json.dumps(settings)}
    write_parquet(empty.replace_schema_metadata(metadata), checkpoint / "empty.parquet")
    with pytest.raises(StageError, match=r"did not happen.*'distributional'.*synonyms\.min_count = 1000000"):
        sample_shards(checkpoint, "exact", 1, monkeypatch, synonyms="empty.parquet")
