"""The lab's laws job on hub-shaped checkpoints of two families: laws are distributions, rows that read the same
words get the same law, and the coupling share bounds how far a row's estimated law lies from its support
prefix's, for any model."""

from __future__ import annotations

import numpy as np
import pytest

from workflow_lib.data.builtin_corpus import build_grammar
from workflow_lib.lab import prefix_sets
from workflow_lib.lab.laws import base_rows, build_sets, model_laws

SETTINGS = {
    "prefixes": 8,
    "length": 24,
    "deltas": [0, 1, 2],
    "last": 12,
    "tries": 16,
    "seed": 3,
    "draws": 3,
    "perturbations": {"uniform": {"q0": "uniform", "beta": 0.8}, "synonym": {"q0": "synonym", "beta": 1.0}},
}


@pytest.fixture(scope="module")
def grammar():
    return build_grammar(seed=7, words_per_class=4)


@pytest.fixture(scope="module")
def sets(grammar):
    return build_sets(grammar, SETTINGS).to_pydict()


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_laws_of_a_checkpoint_are_distributions_and_the_coupling_bounds_them(tmp_path, grammar, sets, family):
    from transformers import AutoTokenizer

    from studies.families import make_checkpoint
    from workflow_lib.sample.sampler import load_model

    texts = grammar.generate("train", n_docs=30, sentences_per_doc=12, seed=7)
    folder = make_checkpoint(tmp_path, family, texts)
    model, tokenizer = load_model(str(folder), "cpu"), AutoTokenizer.from_pretrained(folder)
    ids = np.stack([np.asarray(row) for row in sets["ids"]])
    base, family_, delta = np.array(sets["base"]), np.array(sets["family"]), np.array(sets["delta"])
    rows = base_rows(family_, delta, base)
    assert (delta[rows] == 0).all() and (base[rows] == base).all() and (family_[rows] == family_).all()
    out = model_laws(
        model, tokenizer, grammar, prefix_sets.lexicon(grammar, SETTINGS["seed"]), ids, base, rows, SETTINGS
    )
    laws, differs = out["laws"], out["differs"]
    assert list(out["perturbations"]) == ["none", "synonym", "uniform"] and laws.shape[:2] == (3, len(ids))
    np.testing.assert_allclose(laws.sum(-1), 1.0, atol=1e-9)
    np.testing.assert_allclose(out["laws_half"].sum(-1), 1.0, atol=1e-9)  # an average of whole draws, also at 3
    assert (laws >= 0).all()
    # Unperturbed, a delta-0 row of each family is the same prefix: the very same law.
    zero = np.flatnonzero(delta == 0)
    by_base = {}
    for r in zero:
        by_base.setdefault(base[r], []).append(r)
    for same in by_base.values():
        np.testing.assert_array_equal(laws[0, same[0]], laws[0, same[-1]])
    # Class replacement at beta 1 maps an unseen-synonym row onto its support prefix, draw for draw.
    synonym = np.flatnonzero(family_ == "synonym")
    assert (differs[1, synonym] == 0).all()
    np.testing.assert_array_equal(laws[1, synonym], laws[1, rows[synonym]])
    # Everywhere: TV(row, its support prefix) <= the share of draws whose words differed.
    tv = 0.5 * np.abs(laws - laws[:, rows]).sum(-1)
    assert (tv <= differs + 1e-12).all()
    assert differs[0, delta > 0].min() == 1.0 and (differs[2, delta > 0] < 1).any()


def test_the_half_draws_law_is_the_law_of_the_first_half_of_the_draws(tmp_path, grammar, sets):
    """Draws are keyed by their index, so the first 2 of 4 draws are the 2 draws of a run with draws = 2: its laws
    are the 4-draw run's `laws_half`. "none" is one draw (its half is itself), and `differs` counts draws."""
    from transformers import AutoTokenizer

    from studies.families import make_checkpoint
    from workflow_lib.sample.sampler import load_model

    folder = make_checkpoint(tmp_path, "gpt2", grammar.generate("train", n_docs=30, sentences_per_doc=12, seed=7))
    model, tokenizer = load_model(str(folder), "cpu"), AutoTokenizer.from_pretrained(folder)
    ids = np.stack([np.asarray(row) for row in sets["ids"]])
    base = np.array(sets["base"])
    rows = base_rows(np.array(sets["family"]), np.array(sets["delta"]), base)
    lex = prefix_sets.lexicon(grammar, SETTINGS["seed"])
    four = model_laws(model, tokenizer, grammar, lex, ids, base, rows, {**SETTINGS, "draws": 4})
    two = model_laws(model, tokenizer, grammar, lex, ids, base, rows, {**SETTINGS, "draws": 2})
    np.testing.assert_allclose(four["laws_half"], two["laws"], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(four["laws_half"][0], four["laws"][0])
    np.testing.assert_allclose(four["laws_half"].sum(-1), 1.0, atol=1e-9)
    assert not np.allclose(four["laws"][2], four["laws_half"][2])  # uniform at beta 0.8: the draws differ
    counted = four["differs"][1:] * 4
    np.testing.assert_allclose(counted, np.round(counted), atol=1e-12)
    assert ((np.round(counted) % 4) != 0).any()  # some rows changed in some draws but not all


def test_the_jobs_command_line_writes_the_sets_and_the_laws_the_functions_compute(tmp_path, grammar, sets, monkeypatch):
    """`python -m workflow_lib.lab.laws sets|laws`, run in-process as the lab_sets and lab_laws rules call it: the
    sets file is build_sets' table, and the laws file holds model_laws' arrays for that checkpoint, with its label."""
    import json
    import sys

    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from studies.families import make_checkpoint
    from workflow_lib.lab import laws as job
    from workflow_lib.sample.sampler import load_model

    builtin = {"seed": 7, "words_per_class": 4, "docs": 30, "sentences_per_doc": 12}  # the job drops the last two
    folder = make_checkpoint(tmp_path, "gpt2", grammar.generate("train", n_docs=30, sentences_per_doc=12, seed=7))
    sets_file, laws_file = tmp_path / "sets.parquet", tmp_path / "laws.npz"
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "laws",
            "sets",
            "--builtin",
            json.dumps(builtin),
            "--settings",
            json.dumps(SETTINGS),
            "--output",
            str(sets_file),
        ],
    )
    job.main()
    assert pq.read_table(sets_file).to_pydict() == sets
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "laws",
            "laws",
            "--model",
            str(folder),
            "--sets",
            str(sets_file),
            "--builtin",
            json.dumps(builtin),
            "--settings",
            json.dumps(SETTINGS),
            "--output",
            str(laws_file),
        ],
    )
    job.main()
    written = np.load(laws_file)
    assert str(written["label"]) == str(folder)
    model, tokenizer = load_model(str(folder), "cpu"), AutoTokenizer.from_pretrained(folder)
    ids = np.stack([np.asarray(row) for row in sets["ids"]])
    base = np.array(sets["base"])
    expected = model_laws(
        model,
        tokenizer,
        grammar,
        prefix_sets.lexicon(grammar, SETTINGS["seed"]),
        ids,
        base,
        base_rows(np.array(sets["family"]), np.array(sets["delta"]), base),
        SETTINGS,
    )
    assert set(written.files) == {*expected, "label"}
    for key, value in expected.items():
        np.testing.assert_array_equal(written[key], value)


LAWS_ARGS = {"--model": "m", "--sets": "s.parquet", "--builtin": "{}", "--settings": "{}", "--output": "o.npz"}
SETS_ARGS = {"--builtin": "{}", "--settings": "{}", "--output": "s.parquet"}


def _argv(command: str, args: dict[str, str]) -> list[str]:
    return ["laws", command, *(part for pair in args.items() for part in pair)]


@pytest.mark.parametrize(
    "command, left_out",
    [("sets", name) for name in SETS_ARGS] + [("laws", name) for name in LAWS_ARGS] + [(None, "command")],
)
def test_the_jobs_command_line_refuses_a_missing_argument_naming_it(command, left_out, monkeypatch, capsys):
    """Every argument the rules pass is required: a rule that lost one stops at the parser, naming it (and the
    command), before any grammar or model is built; so does a call without a command."""
    import sys

    from workflow_lib.lab import laws as job

    args = {"sets": SETS_ARGS, "laws": LAWS_ARGS}.get(command or "", {})
    argv = ["laws"] if command is None else _argv(command, {k: v for k, v in args.items() if k != left_out})
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as stopped:
        job.main()
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    usage = "usage: python -m workflow_lib.lab.laws" + ("" if command is None else f" {command}")
    assert error.startswith(usage) and f"error: the following arguments are required: {left_out}" in error


@pytest.mark.parametrize(
    "command, broken, name",
    [
        ("sets", "--builtin", "builtin"),
        ("sets", "--settings", "lab"),
        ("laws", "--builtin", "builtin"),
        ("laws", "--settings", "lab"),
    ],
)
def test_the_jobs_command_line_names_the_argument_whose_json_is_broken(command, broken, name, monkeypatch):
    """A broken JSON argument stops the job with an error that says which one (before any model is loaded)."""
    import sys

    from workflow_lib.cli import StageError
    from workflow_lib.lab import laws as job

    args = {**(SETS_ARGS if command == "sets" else LAWS_ARGS), "--builtin": '{"seed": 7, "words_per_class": 4}'}
    monkeypatch.setattr(sys, "argv", _argv(command, {**args, broken: "{not json"}))
    with pytest.raises(StageError, match=rf"^{name}: not valid JSON \("):
        job.main()


@pytest.mark.parametrize("cuda", [True, False])
def test_the_laws_command_loads_the_model_on_the_gpu_where_there_is_one_at_the_revision_given(
    cuda, tmp_path, grammar, monkeypatch
):
    """The tokenizer and the model come from --model at --revision (an untrained hub model's pinned commit), the
    model on the GPU when torch sees one: checked by recording the loaders' arguments, without a GPU."""
    import json
    import sys

    import pyarrow.parquet as pq
    import torch
    import transformers

    from workflow_lib.lab import laws as job
    from workflow_lib.sample import sampler

    pq.write_table(build_sets(grammar, SETTINGS), tmp_path / "sets.parquet")
    calls = []

    class Loaded(Exception):
        pass

    def tokenizer(name, **kwargs):
        calls.append(("tokenizer", name, kwargs))

    def model(name, device, **kwargs):
        calls.append(("model", name, device, kwargs))
        raise Loaded

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tokenizer)
    monkeypatch.setattr(sampler, "load_model", model)
    args = {
        **LAWS_ARGS,
        "--model": "org/model",
        "--revision": "0123abc",
        "--sets": str(tmp_path / "sets.parquet"),
        "--builtin": json.dumps({"seed": 7, "words_per_class": 4}),
        "--settings": json.dumps(SETTINGS),
    }
    monkeypatch.setattr(sys, "argv", _argv("laws", args))
    with pytest.raises(Loaded):
        job.main()
    assert calls == [
        ("tokenizer", "org/model", {"revision": "0123abc"}),
        ("model", "org/model", "cuda" if cuda else "cpu", {"revision": "0123abc"}),
    ]


def test_the_model_reads_each_distinct_prefix_once_a_draw_unperturbed_and_none_is_one_draw(grammar, sets, monkeypatch):
    """The lab draws T itself, so the model is asked for its plain law (intensity 0, one draw, seed 0) of the
    distinct word sequences of a draw only; "none" reads the unperturbed prefixes once, not `draws` times. A
    recording stand-in for the model checks the calls, and that each row gets its own sequence's law back."""
    from workflow_lib.evaluate import extrapolation

    ids = np.stack([np.asarray(row) for row in sets["ids"]])
    base = np.array(sets["base"])
    rows = base_rows(np.array(sets["family"]), np.array(sets["delta"]), base)
    lex = prefix_sets.lexicon(grammar, SETTINGS["seed"])
    words = len(grammar.vocabulary)
    calls = []

    def next_word(model, tokenizer, prefixes, word_tokens, perturbation, table, draws, seed, **rest):
        calls.append((len(prefixes), perturbation, table, draws, seed, rest))
        # A law that names its sequence: all mass on the cell of (hash of the words) mod W.
        cells = [hash(" ".join(p)) % words for p in prefixes]
        return np.eye(words + 1)[cells][None]

    monkeypatch.setattr(extrapolation, "word_token_ids", lambda tokenizer, vocabulary: np.arange(len(vocabulary)))
    monkeypatch.setattr(extrapolation, "model_next_word", next_word)
    out = model_laws(None, None, grammar, lex, ids, base, rows, SETTINGS)
    assert len(calls) == 1 + SETTINGS["draws"] * len(SETTINGS["perturbations"])
    assert all(c[1:] == ({"intensity": 0.0}, None, 1, 0, {}) for c in calls)
    distinct = len(np.unique(ids, axis=0))
    assert calls[0][0] == distinct < len(ids)  # the delta-0 rows of both families share their prefixes
    expected = np.eye(words + 1)[[hash(" ".join(np.asarray(lex.words)[row])) % words for row in ids]]
    np.testing.assert_array_equal(out["laws"][0], expected)
    assert set(out) == {"laws", "laws_half", "differs", "perturbations", "single"}  # the names verdicts reads
    assert out["single"].all()  # every word has a token here, token 0 included
