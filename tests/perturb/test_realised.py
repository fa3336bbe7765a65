"""A perturbation that happened, measured (issue 64, item 3): the realised share beside the nominal intensity in every
perturbed training file, the stop rule, and the synonyms job's refusal of a table no perturbation could use."""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa
import pytest

from workflow_lib.cli import StageError
from workflow_lib.files import read_parquet, write_parquet
from workflow_lib.perturb.realised import MIN_EXPECTED, STOP_FRACTION, Realised, check_realised
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.perturb.training_data import perturb_blocks, read_realised

V = 12
EVERY = SynonymTable.from_rows(V, list(range(1, 11)), [[(t % 10) + 1] for t in range(1, 11)], [[1.0]] * 10)
HALF = SynonymTable.from_rows(V, list(range(1, 6)), [[(t % 5) + 1] for t in range(1, 6)], [[1.0]] * 5)
EMPTY = SynonymTable.from_rows(V, [], [], [])


def blocks(n=400, width=16, seed=0):
    """Token ids 1..10, with the special token 0 at each block's start (never perturbable)."""
    b = np.random.default_rng(seed).integers(1, 11, size=(n, width))
    b[:, 0] = 0
    return b


def tolerance(p: float, n: int) -> float:
    """Four binomial standard errors of a share p over n positions."""
    return 4 * np.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("strategy", ["insertion", "replacement", "deletion", "embedding-noise"])
@pytest.mark.parametrize("mode", ["augment", "prefix"])
def test_a_perturbed_training_file_records_its_realised_share_near_the_nominal(strategy, mode):
    b, alpha = blocks(), 0.1
    embedding = {"strategy": strategy, "noise": "gaussian", "scale": 1.0} if strategy == "embedding-noise" else None
    out = perturb_blocks(b, mode, strategy, alpha, EVERY, 2, 1, "k", [0], embedding=embedding)
    realised = read_realised(out)
    n = 2 * b.size - 2 * len(b)  # two copies, the special token of every block left out
    assert realised.perturbable == n and realised.eligible == n and realised.nominal == alpha
    assert realised.selected == sum(len(r["source_positions"]) for r in out.to_pylist())
    assert abs(realised.share - alpha) < tolerance(alpha, n)


def test_the_realised_share_counts_a_partial_table_against_the_nominal():
    """Half the tokens have a synonym: insertion realises half the intensity (deletion, which needs none, all)."""
    b, alpha = blocks(), 0.2
    n = b.size - len(b)
    insertion = read_realised(perturb_blocks(b, "augment", "insertion", alpha, HALF, 1, 1, "k", [0]))
    deletion = read_realised(perturb_blocks(b, "augment", "deletion", alpha, HALF, 1, 1, "k", [0]))
    covered = float(np.isin(b[:, 1:], np.arange(1, 6)).mean())
    assert insertion.eligible == int(np.isin(b, np.arange(1, 6)).sum())
    assert abs(insertion.share - alpha * covered) < tolerance(alpha * covered, n)
    assert abs(deletion.share - alpha) < tolerance(alpha, n)


def test_neftune_realises_every_position_by_construction():
    b = blocks(20)
    out = perturb_blocks(b, "augment", "neftune", 1.0, EMPTY, 1, 1, "k", [0], embedding={"neftune_alpha": 5.0})
    assert read_realised(out).share == 1.0 and read_realised(out).stop_reason() is None


def test_the_stop_rule():
    # nothing eligible: stopped whatever the size
    assert Realised(0.025, 10, 0, 0).stop_reason() is not None
    # a small job realising nothing by chance is not stopped (expected count 0.25 < MIN_EXPECTED)
    assert Realised(0.025, 10, 0, 10).stop_reason() is None
    # expected count at MIN_EXPECTED: below STOP_FRACTION of the nominal stops, at it passes
    n = int(MIN_EXPECTED / 0.1)
    below = int(np.ceil(STOP_FRACTION * 0.1 * n)) - 1
    assert Realised(0.1, n, below, n // 10).stop_reason() is not None
    assert Realised(0.1, n, below + 1, n // 10).stop_reason() is None
    # just under MIN_EXPECTED: the same share passes
    assert Realised(0.1, n - 1, below, n // 10).stop_reason() is None
    # intensity 0 is the baseline: nothing to realise
    assert Realised(0.0, 1000, 0, 0).stop_reason() is None
    # counts add up (a sampling job's shards)
    assert (Realised(0.1, 100, 10, 50) + Realised(0.1, 300, 20, 60)) == Realised(0.1, 400, 30, 110)


def test_a_chance_shortfall_at_the_threshold_is_rare():
    """At the smallest job the rule judges (expected count MIN_EXPECTED), a full table almost never trips it."""
    from scipy.stats import binom

    n, alpha = 4 * MIN_EXPECTED, 0.25
    below = int(np.ceil(STOP_FRACTION * alpha * n)) - 1  # the largest count that stops
    assert binom.cdf(below, n, alpha) < 1e-4


def test_the_stop_names_the_synonym_settings_and_the_condition():
    settings = {"source": "distributional", "k": 10, "min_count": 10**6}
    with pytest.raises(StageError) as error:
        check_realised(Realised(0.1, 1000, 0, 0), "training data X (insertion at 0.1)", settings, "syn.parquet")
    message = str(error.value)
    for part in ("synonyms.k = 10", "synonyms.min_count = 1000000", "'distributional'", "insertion at 0.1"):
        assert part in message


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tokenizer of the builtin language saved to a folder, and its training tokens as a blocks Parquet."""
    from workflow_lib.data.builtin_corpus import build_grammar
    from workflow_lib.data.tokenization import train_bpe

    folder = tmp_path_factory.mktemp("corpus")
    texts = build_grammar(seed=3, words_per_class=4).generate("train", n_docs=100, sentences_per_doc=10, seed=3)
    tokenizer = train_bpe(texts, vocab_size=400)
    tokenizer.save_pretrained(folder / "tokenizer")
    flat = np.concatenate([np.asarray(ids) for ids in tokenizer(texts)["input_ids"]])
    width = 32
    ids = flat[: len(flat) // width * width].astype(np.int32)
    offsets = pa.array(np.arange(0, len(ids) + 1, width, dtype=np.int32))
    write_parquet(pa.table({"input_ids": pa.ListArray.from_arrays(offsets, pa.array(ids))}), str(folder / "t.parquet"))
    return folder


def run_main(monkeypatch, module, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", [module.__name__, *args])
    module.main()


def synonyms_job(monkeypatch, corpus, output, min_count: int) -> None:
    from workflow_lib.perturb import synonyms

    settings = json.dumps({"k": 5, "min_count": min_count})
    tokens, tokenizer = str(corpus / "t.parquet"), str(corpus / "tokenizer")
    run_main(monkeypatch, synonyms, "--source", "distributional", "--tokenizer", tokenizer, "--tokens", tokens,
             "--settings", settings, "--output", str(output))  # fmt: skip


def test_the_synonyms_job_refuses_an_empty_table_naming_min_count(monkeypatch, corpus, tmp_path):
    output = tmp_path / "distributional.parquet"
    with pytest.raises(StageError, match=r"synonyms\.min_count = 1000000000.*empty"):
        synonyms_job(monkeypatch, corpus, output, min_count=10**9)
    assert not output.exists()


def test_the_synonyms_job_records_its_settings_in_the_table(monkeypatch, corpus, tmp_path):
    from workflow_lib.perturb.realised import table_settings

    output = tmp_path / "distributional.parquet"
    synonyms_job(monkeypatch, corpus, output, min_count=2)
    stored = read_parquet(str(output))
    assert table_settings(stored.schema.metadata) == {"source": "distributional", "k": 5, "min_count": 2}


def perturb_job(monkeypatch, corpus, tmp_path, synonyms: str, intensity: float = 0.1) -> dict:
    from workflow_lib.perturb import training_data

    condition = {"mode": "augment", "strategy": "insertion", "intensity": intensity, "copies": 1, "seed": 1}
    meta = tmp_path / "out.json"
    run_main(monkeypatch, training_data, "--tokens", str(corpus / "t.parquet"), "--tokenizer",
             str(corpus / "tokenizer"), "--synonyms", synonyms, "--condition", json.dumps(condition), "--key", "key",
             "--output", str(tmp_path / "out.parquet"), "--meta", str(meta))  # fmt: skip
    return json.loads(meta.read_text())


def test_the_perturb_job_records_realised_against_nominal(monkeypatch, corpus, tmp_path):
    synonyms_job(monkeypatch, corpus, tmp_path / "syn.parquet", min_count=2)
    meta = perturb_job(monkeypatch, corpus, tmp_path, str(tmp_path / "syn.parquet"))
    realised = meta["realised"]
    assert realised["nominal_intensity"] == 0.1
    assert realised["realised_share"] == realised["selected_positions"] / realised["perturbable_positions"]
    stored = read_realised(read_parquet(str(tmp_path / "out.parquet")))
    assert stored.as_dict() == realised
    eligible = realised["eligible_positions"] / realised["perturbable_positions"]
    n = realised["perturbable_positions"]
    assert abs(realised["realised_share"] - 0.1 * eligible) < tolerance(0.1 * eligible, n)


def test_a_perturb_job_that_realises_nothing_stops(monkeypatch, corpus, tmp_path):
    """An empty table written past the synonyms job (as main wrote them before): the perturb job stops, naming its
    settings, and writes no data."""
    from workflow_lib.perturb.realised import SETTINGS_KEY

    empty = SynonymTable.from_rows(400, [], [], []).to_arrow()
    settings = {"source": "distributional", "k": 5, "min_count": 10**9}
    metadata = {**empty.schema.metadata, SETTINGS_KEY: json.dumps(settings)}
    write_parquet(empty.replace_schema_metadata(metadata), str(tmp_path / "empty.parquet"))
    with pytest.raises(StageError, match=r"did not happen.*synonyms\.min_count = 1000000000"):
        perturb_job(monkeypatch, corpus, tmp_path, str(tmp_path / "empty.parquet"))
    assert not (tmp_path / "out.parquet").exists()
