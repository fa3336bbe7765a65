"""Tables, figures and the summary, from hand-made metrics files."""

from __future__ import annotations

import json

import polars as pl
import pytest

from workflow_lib.report.collect import collect, read_metrics
from workflow_lib.report.contrasts import COLUMNS, JOINT, PERMUTATION
from workflow_lib.report.figures import FIGURES
from workflow_lib.report.settings import report_view
from workflow_lib.report.summary import StudyResults, summary
from workflow_lib.report.tables import paper_comparison, tables

BASE = "results/metrics/tiny/syn/{obj}/{syn}/augment-m1/{st}-{ti}/seed1/{es}/{decoder}/{tsyn}/{tst}-{tti}-exact.json"


def write(
    tmp_path, obj, ti, tti, es, mauve, rouge, st="insertion", kind="metrics", tv=None, decoder="unbiased", **extra
):
    syn = "none" if float(ti) == 0 else "distributional"
    tsyn = "none" if float(tti) == 0 else "distributional"
    path = tmp_path / BASE.format(
        obj=obj,
        syn=syn,
        st=st if float(ti) else "none",
        ti=ti,
        es=es,
        tsyn=tsyn,
        tst=st if float(tti) else "none",
        tti=tti,
        decoder=decoder,
    )
    if kind == "extrapolation":
        path = tmp_path / str(path.relative_to(tmp_path)).replace("results/metrics", "results/extrapolation")
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "metrics":
        data = {
            "mauve_mean": mauve[0],
            "mauve_2se": mauve[1],
            "rouge1_mean": rouge[0],
            "rouge1_2se": rouge[1],
            "runs": 3,
            "prompts": 50,
        }
    else:
        data = {"tv_mean": tv[0], "tv_2se": tv[1], "law": "ood" if "ood" in es else "in_support"}
    path.write_text(json.dumps(data | extra))
    return str(path)


@pytest.fixture
def study(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = [
        write(tmp_path, "mle", "0", "0", "test", (0.80, 0.02), (0.50, 0.01)),
        write(tmp_path, "mle", "0.025", "0.025", "test", (0.90, 0.03), (0.52, 0.01)),
        write(tmp_path, "mle", "0", "0.025", "test", (0.70, 0.05), (0.49, 0.02)),
        write(tmp_path, "mle", "0.025", "0", "test", (0.75, 0.04), (0.51, 0.02)),
        write(tmp_path, "brier", "0", "0", "test", (0.60, 0.02), (0.45, 0.01)),
        write(tmp_path, "brier", "0.025", "0.025", "ood", (0.65, 0.02), (0.40, 0.01)),
        write(tmp_path, "mle", "0.1", "0.1", "test", (0.85, 0.02), (0.50, 0.01)),
        write(tmp_path, "mle", "0.1", "0.1", "test", (0.82, 0.02), (0.50, 0.01), st="deletion"),
        write(tmp_path, "mle", "0", "0", "ood", None, None, kind="extrapolation", tv=(0.30, 0.01)),
        write(tmp_path, "mle", "0.025", "0.025", "ood", None, None, kind="extrapolation", tv=(0.20, 0.01)),
    ]
    return collect([p.split(str(tmp_path) + "/")[1] for p in paths])


def test_collect_recovers_conditions_from_paths(study):
    assert study.height == 10  # 8 metrics rows, and 2 extrapolation-only rows (mle on ood has no metrics here)
    row = study.filter(
        (pl.col("objective") == "mle") & (pl.col("train_intensity") == 0.025) & (pl.col("eval_set") == "ood")
    )
    assert row["tv_mean"][0] == 0.20 and row["mauve_mean"][0] is None


def test_table1_rows_columns_bold_and_2se(study, tmp_path):
    tables(study, str(tmp_path / "tables"), 0.025, ["test", "ood"])
    t1 = pl.read_csv(tmp_path / "tables/table1.csv")
    assert t1.columns == [
        "model",
        "objective",
        "perturbation",
        "test MAUVE",
        "test ROUGE-1",
        "ood MAUVE",
        "ood ROUGE-1",
    ]
    rows = {(r["objective"], r["perturbation"]): r for r in t1.to_dicts()}
    assert set(rows) == {("mle", "no"), ("mle", "insertion 0.025"), ("brier", "no"), ("brier", "insertion 0.025")}
    assert rows[("mle", "insertion 0.025")]["test MAUVE"] == "0.900 ± 0.065"
    assert not rows[("brier", "insertion 0.025")]["test MAUVE"]  # a missing cell stays empty, not zero
    assert rows[("brier", "insertion 0.025")]["ood MAUVE"] == "0.650 ± 0.043"
    md = (tmp_path / "tables/table1.md").read_text()
    assert "**0.900 ± 0.065**" in md and "**0.520 ± 0.022**" in md and "**0.800" not in md
    tex = (tmp_path / "tables/table1.tex").read_text()
    assert r"\toprule" in tex and r"\textbf{0.900 $\pm$ 0.065}" in tex


def test_bold_is_said_to_be_the_largest_mean_not_a_significant_difference(study, tmp_path):
    """0.90 ± 0.03 against 0.80 ± 0.02 is bold, though no contrast supports it (this study has none): every caption
    with bold says what bold is, in the Markdown and as the LaTeX's first line."""
    written = tables(study, str(tmp_path / "tables"), 0.025, ["test", "ood"])
    for name in ("table1", "emo_brier", "strategies", "ablation"):
        assert "Bold: the largest mean of its column, a description, not a significant difference" in written[name]
        tex = (tmp_path / f"tables/{name}.tex").read_text()
        assert tex.startswith("% ") and "not a significant difference" in tex.splitlines()[0]
    assert "**0.900 ± 0.065**" in written["table1"]
    assert "a description, not a significant difference" in written["metrics"]
    config = {"models": {"tiny": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}}
    assert "Bold marks the largest mean of a column, not a significant difference" in summary(
        StudyResults(study, written), config, 0.025
    )


def test_ablation_and_strategy_tables(study, tmp_path):
    tables(study, str(tmp_path / "tables"), 0.025, ["test", "ood"])
    ablation = pl.read_csv(tmp_path / "tables/ablation.csv").filter(
        (pl.col("objective") == "mle") & (pl.col("eval_set") == "test")
    )
    assert ablation.columns[3:] == [
        "strategy",
        "NoPerturb MAUVE",
        "TrainPerturb MAUVE",
        "TestPerturb MAUVE",
        "Both MAUVE",
    ]
    assert ablation["strategy"].to_list() == ["insertion"]  # deletion ran at 0.1 only: no arm at the headline 0.025
    # only the headline intensity (0.025) counts: the 0.1 runs are not "Both"
    assert ablation["NoPerturb MAUVE"][0] == "0.800 ± 0.043" and ablation["Both MAUVE"][0] == "0.900 ± 0.065"
    assert ablation["TrainPerturb MAUVE"][0] == "0.750 ± 0.086" and ablation["TestPerturb MAUVE"][0] == "0.700 ± 0.108"
    strategies = pl.read_csv(tmp_path / "tables/strategies.csv").filter(
        (pl.col("objective") == "mle") & (pl.col("eval_set") == "test")
    )
    by_strategy = {r["strategy"]: r for r in strategies.to_dicts()}
    assert by_strategy["deletion"]["0.1 MAUVE"] == "0.820 ± 0.043" and not by_strategy["deletion"]["0.025 MAUVE"]
    assert by_strategy["insertion"]["0 MAUVE"] == by_strategy["deletion"]["0 MAUVE"] == "0.800 ± 0.043"
    assert "replacement" not in by_strategy  # no replacement ran: no row holding only the shared baseline


def test_the_ablation_has_a_row_per_strategy_at_its_own_intensity(study, tmp_path):
    """The embedding space's strategies beside insertion: embedding-noise's arms at the headline intensity, Both
    among its contrasts (insertion's Both is Table 1's); NEFTune's TrainPerturb at intensity 1, and no arm at
    sampling, where it does not perturb."""
    from workflow_lib.comparisons import condition_rows, pairs

    write(tmp_path, "mle", "1", "0", "test", (0.70, 0.02), (0.50, 0.01), st="neftune")
    write(tmp_path, "mle", "0.025", "0", "test", (0.81, 0.02), (0.50, 0.01), st="embedding-noise")
    write(tmp_path, "mle", "0.025", "0.025", "test", (0.83, 0.02), (0.50, 0.01), st="embedding-noise")
    write(tmp_path, "mle", "0.1", "0", "test", (0.60, 0.02), (0.50, 0.01), st="embedding-noise")  # not the headline
    paths = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("results/metrics/**/*.json"))
    tables(collect(paths), str(tmp_path / "tables"), 0.025, ["test", "ood"])
    ablation = pl.read_csv(tmp_path / "tables/ablation.csv").filter(
        (pl.col("objective") == "mle") & (pl.col("eval_set") == "test")
    )
    rows = {r["strategy"]: r for r in ablation.to_dicts()}
    assert list(rows) == ["insertion", "embedding-noise", "neftune"]
    assert rows["embedding-noise"]["NoPerturb MAUVE"] == rows["neftune"]["NoPerturb MAUVE"] == "0.800 ± 0.043"
    assert rows["embedding-noise"]["TrainPerturb MAUVE"] == "0.810 ± 0.043"
    assert rows["embedding-noise"]["Both MAUVE"] == "0.830 ± 0.043" and not rows["embedding-noise"]["TestPerturb MAUVE"]
    assert rows["neftune"]["TrainPerturb MAUVE"] == "0.700 ± 0.043" and not rows["neftune"]["Both MAUVE"]
    designed = {(p["a"], p["b"]) for p in pairs(condition_rows(paths), 0.025) if p["family"] == "ablation"}
    assert designed == {
        ("TrainPerturb", "NoPerturb"),
        ("TestPerturb", "NoPerturb"),
        ("embedding-noise: TrainPerturb", "NoPerturb"),
        ("embedding-noise: Both", "NoPerturb"),
        ("neftune: TrainPerturb", "NoPerturb"),
    }


def test_the_tv_table_names_the_strategy_where_a_study_has_several(study, tmp_path):
    """Insertion's and the embedding noise's rows at one intensity are two conditions: the TV table says which."""
    write(
        tmp_path,
        "mle",
        "0.025",
        "0.025",
        "ood",
        None,
        None,
        st="embedding-noise",
        kind="extrapolation",
        tv=(0.25, 0.01),
    )
    paths = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("results/**/*.json"))
    frame = collect(paths)
    written = tables(frame, str(tmp_path / "tables"), 0.025, ["test", "ood"])
    config = {"models": {"tiny": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}}
    text = summary(StudyResults(frame, written), config, 0.025)
    table = text.split("## Extrapolation error against the exact law")[1]
    assert "| objective | train T | train α | test T | test α |" in table
    assert "| mle | insertion | 0.025 | insertion | 0.025 | 0.200 ± 0.010 |" in table
    assert "| mle | embedding-noise | 0.025 | embedding-noise | 0.025 | 0.250 ± 0.010 |" in table


def test_figures_are_written_and_not_empty(study, tmp_path):
    for name, fn in FIGURES.items():
        fn(study, str(tmp_path / "fig" / name))
        for ext in ("png", "pdf"):
            assert (tmp_path / "fig" / f"{name}.{ext}").stat().st_size > 5000


def test_summary_says_what_ran_and_has_no_paper_match(study, tmp_path):
    written = tables(study, str(tmp_path / "tables"), 0.025, ["test", "ood"])
    config = {"models": {"tiny": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}}
    text = summary(StudyResults(study, written, ["results/report/figures/ablation.png"]), config, 0.025)
    assert "## Headline table" in text and "No model and eval set of this study is one of the paper's" in text
    assert "Extrapolation error against the exact law" in text and "0.200 ± 0.010" in text
    assert "Simulation study" not in text
    simulation = "# Simulation study (paper Section 4)\n\n| V | synonyms |\n|---|---|\n| 50 | oracle |\n"
    text = summary(StudyResults(study, written, simulation=simulation), config, 0.025)
    assert "## Simulation study (paper Section 4)\n\n| V | synonyms |\n|---|---|\n| 50 | oracle |" in text
    assert "results/simulation/figure.png" in text and text.count("# Simulation study") == 1


def test_the_tv_table_sizes_the_monte_carlo_bias_of_its_sampling_perturbed_rows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tv = {"kind": "extrapolation", "mauve": None, "rouge": None}
    paths = [
        write(tmp_path, "mle", "0", "0", "ood", tv=(0.30, 0.011), draws=1, tv_bias_estimate=0.0, **tv),
        write(tmp_path, "mle", "0.025", "0.025", "ood", tv=(0.20, 0.013), draws=32, tv_bias_estimate=1.8e-4, **tv),
        write(tmp_path, "mle", "0", "0.4", "ood", tv=(0.25, 0.017), draws=32, tv_bias_estimate=2.3e-4, **tv),
    ]
    frame = collect([p.split(str(tmp_path) + "/")[1] for p in paths])
    assert sorted(frame["tv_draws"].to_list()) == [1, 32, 32]
    config = {"models": {"tiny": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}}
    text = summary(StudyResults(frame, tables(frame, str(tmp_path / "t"), 0.025, ["ood"])), config, 0.025)
    # the unperturbed row's exact law (0.011, no bias) takes no part: 2 rows, the larger estimate, their least 2 SE
    assert (
        "Here the split-half estimate of that bias (it sizes it, it does not bound it) is at most 0.00023 over the 2 "
        "sampling-perturbed rows, at 32 draws; their smallest 2 SE is 0.013.\n" in text
    )
    # files of an older run carry no estimate: the caption says nothing it cannot back
    old = collect([write(tmp_path, "mle", "0.025", "0.025", "ood", tv=(0.2, 0.01), **tv).split(str(tmp_path) + "/")[1]])
    assert "split-half" not in summary(StudyResults(old, {}), config, 0.025)


def test_paper_numbers_side_by_side_when_the_config_matches(study):
    frame = study.with_columns(
        pl.col("model").replace("tiny", "gpt2-model"), pl.col("eval_set").replace("test", "wikitext2-test")
    )
    config = {
        "models": {"gpt2-model": {"source": "hf", "name": "gpt2"}},
        "eval_sets": {"wikitext2-test": {"dataset": "wt2"}},
        "datasets": {"wt2": {"source": "hf", "path": "Salesforce/wikitext", "name": "wikitext-2-raw-v1"}},
    }
    text = paper_comparison(frame, config, 0.025)
    assert "| gpt2-model | mle | no | 0.800 ± 0.043 (paper 0.74) |" in text
    assert "| gpt2-model | mle | insertion 0.025 | 0.900 ± 0.065 (paper 0.89) |" in text
    # The tables job reads only report_view(config): the same comparison from it, though the rest of the config
    # (which an edit may change without rerunning the report) is gone.
    full = {
        **config,
        "training": {"report_to": ["tensorboard"]},
        "datasets": {**config["datasets"], "unused": {"path": "x"}},
        "models": {"gpt2-model": {**config["models"]["gpt2-model"], "training": {"batch_size": 4}}},
    }
    view = report_view(full)
    assert paper_comparison(frame, view, 0.025) == text
    assert view == {
        "models": {"gpt2-model": {"source": "hf", "name": "gpt2"}},
        "eval_sets": {"wikitext2-test": {"dataset": "wt2"}},
        "datasets": {"wt2": {"path": "Salesforce/wikitext", "name": "wikitext-2-raw-v1"}},
    }


def test_summary_lists_every_splits_source_checksums_and_steps(study, tmp_path):
    """The Data section: URL (pinned or not), hub id and revision, the recipe's steps, the top-up's source."""
    written = tables(study, str(tmp_path / "tables"), 0.025, ["test", "ood"])
    config = {"models": {"tiny": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}}
    url = "https://e.org/v1/webtext.test.jsonl"
    web = {
        "dataset": "webtext",
        "split": "test",
        "source": "url",
        "recipe": "mixce",
        "cleaning": "webtext",
        "rows_written": 5000,
        "rows_sha256": "f" * 64,
        "steps": [
            {"step": "load", "rows": 5000},
            {"step": "clean and 50 < words < 1000 (webtext)", "rows": 4712},
            {"step": "top-up from train", "rows": 5000, "added": 288},
        ],
        "provenance": {
            "files": [
                {
                    "path": "results/downloads/webtext/webtext.test.jsonl",
                    "sha256": "1" * 64,
                    "url": url,
                    "pinned_sha256": None,
                    "head_bytes": None,
                }
            ]
        },
        "top_up": {"split": "train", "rows": 288, "first_doc_id": 4712, "skipped": 0},
        "top_up_provenance": {
            "files": [
                {
                    "path": "p",
                    "sha256": "2" * 64,
                    "url": "https://e.org/v1/webtext.train.jsonl",
                    "pinned_sha256": "2" * 64,
                    "head_bytes": 8388608,
                }
            ]
        },
    }
    wiki = {
        "dataset": "wikitext103",
        "split": "test",
        "source": "hf",
        "recipe": "raw",
        "cleaning": "wikitext",
        "rows_written": 4358,
        "rows_sha256": "e" * 64,
        "steps": [{"step": "load", "rows": 4358}],
        "top_up": None,
        "provenance": {
            "path": "Salesforce/wikitext",
            "name": "wikitext-103-raw-v1",
            "revision": None,
            "hub_split": "test",
            "fingerprint": "abc123",
        },
    }
    text = summary(StudyResults(study, written, data=[wiki, web]), config, 0.025)
    data = text.split("## Data\n", 1)[1]
    assert data.index("**webtext/test**") < data.index("**wikitext103/test**")
    assert "load 5000 → clean and 50 < words < 1000 (webtext) 4712 → top-up from train 5000" in data
    assert f"{url}: sha256 `{'1' * 64}` (not pinned: set this sha256 in the config to pin it)" in data
    assert "top-up: 288 rows (doc_id 4712 on) from train" in data
    assert f"webtext.train.jsonl (first 8388608 bytes, whole lines): sha256 `{'2' * 64}` (pinned)" in data
    assert "hub dataset Salesforce/wikitext (wikitext-103-raw-v1), split test, revision unpinned (latest)" in data
    assert f"sha256 of the rows `{'e' * 64}`" in data
    assert "## Data" not in summary(StudyResults(study, written), config, 0.025)


def test_a_record_is_named_by_its_path_not_by_the_study_that_cached_it(tmp_path):
    from workflow_lib.report.summary import data_record

    path = tmp_path / "results/data/web-again/test.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"dataset": "webtext", "split": "test", "rows_written": 3}))
    assert data_record(str(path)) == {"dataset": "web-again", "split": "test", "rows_written": 3}


def provenance(commit="c0ffee", dirty=False, settings="5e7"):
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "featuriser": "gpt2-large",
        "settings_sha256": settings,
        "versions": {
            "python": "3.11.9",
            "torch": "2.13.0",
            "transformers": "5.23.0",
            "mauve-text": "0.4.0",
            "rouge-score": "0.1.2",
            "workflow": "0.1.0",
        },
    }


def write_perplexity(tmp_path, obj, ti, es, perplexity):
    syn, st = ("none", "none") if float(ti) == 0 else ("distributional", "insertion")
    path = tmp_path / f"results/perplexity/tiny/syn/{obj}/{syn}/augment-m1/{st}-{ti}/seed1/{es}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"perplexity": perplexity, "nll_per_token": 3.0, "tokens": 100, "prompts": 10}))
    return str(path)


NEW_FIELDS = {
    "rouge2_mean": 0.21,
    "rouge2_2se": 0.01,
    "rougeL_mean": 0.41,
    "rougeL_2se": 0.01,
    "distinct_2_mean": 0.8,
    "distinct_2_2se": 0.02,
    "repetition_mean": 0.05,
    "repetition_2se": 0.01,
    "num_buckets": [50, 50],
    "mauve_variance": {"total": 1e-4, "sampling": 6e-5, "clustering": 4e-5, "clustering_share": 0.4},
}


@pytest.fixture
def decoders(tmp_path, monkeypatch):
    """mle with and without perturbation on two decoders, an untrained model, perplexity files, new fields."""
    monkeypatch.chdir(tmp_path)
    paths = [
        write(tmp_path, "mle", ti, ti, "test", (m, 0.02), (0.5, 0.01), decoder=d, provenance=provenance(), **NEW_FIELDS)
        for ti, m in (("0", 0.80), ("0.025", 0.90))
        for d in ("unbiased", "top-p-0.9")
    ]
    paths.append(
        write(
            tmp_path,
            "untrained",
            "0",
            "0",
            "test",
            (0.40, 0.03),
            (0.3, 0.01),
            provenance=provenance(commit="beef", dirty=True, settings="5e7"),
        )
    )
    paths += [
        write_perplexity(tmp_path, "mle", "0", "test", 25.0),
        write_perplexity(tmp_path, "mle", "0.025", "test", 23.5),
        write_perplexity(tmp_path, "untrained", "0", "test", 40.0),
    ]
    return collect([p.split(str(tmp_path) + "/")[1] for p in paths])


def test_collect_reads_the_decoder_the_new_fields_and_joins_perplexity(decoders, tmp_path):
    assert decoders.columns[:15] == [
        "model",
        "dataset",
        "objective",
        "train_synonyms",
        "train_mode",
        "copies",
        "train_strategy",
        "train_intensity",
        "seed",
        "eval_set",
        "decoder",
        "test_synonyms",
        "test_strategy",
        "test_intensity",
        "test_mode",
    ]
    assert set(decoders["decoder"]) == {"unbiased", "top-p-0.9"}
    perturbed = decoders.filter(pl.col("train_intensity") == 0.025)
    assert perturbed["perplexity"].to_list() == [23.5, 23.5]  # one model, one perplexity, whatever the decoder
    row = perturbed.row(0, named=True)
    assert (row["rouge2_mean"], row["distinct_2_mean"], row["num_buckets"], row["mauve_clustering_share"]) == (
        0.21,
        0.8,
        50,
        0.4,
    )
    assert (row["git_commit"], row["version_mauve_text"], row["featuriser"]) == ("c0ffee", "0.4.0", "gpt2-large")
    untrained = decoders.filter(pl.col("objective") == "untrained").row(0, named=True)
    assert untrained["perplexity"] == 40.0 and untrained["rouge2_mean"] is None  # a field the file lacks is null
    decoders.write_csv(tmp_path / "metrics.csv")
    assert read_metrics(str(tmp_path / "metrics.csv")).equals(decoders)


def test_tables_show_the_decoder_and_mark_untrained_rows(decoders, tmp_path):
    written = tables(decoders, str(tmp_path / "tables"), 0.025, ["test"])
    t1 = pl.read_csv(tmp_path / "tables/table1.csv")
    assert t1.columns == ["model", "objective", "decoder", "perturbation", "test MAUVE", "test ROUGE-1"]
    rows = {(r["objective"], r["decoder"], r["perturbation"]): r["test MAUVE"] for r in t1.to_dicts()}
    assert rows[("untrained (zero-shot)", "unbiased", "no")] == "0.400 ± 0.065"
    assert rows[("mle", "top-p-0.9", "insertion 0.025")] == "0.900 ± 0.043"
    assert "untrained (zero-shot)" in written["table1"]
    other = pl.read_csv(tmp_path / "tables/metrics.csv", infer_schema=False)
    assert other.columns == [
        "eval_set",
        "model",
        "objective",
        "perturbation",
        "decoder",
        "ROUGE-2",
        "ROUGE-L",
        "perplexity",
        "distinct-2",
        "repetition",
    ]
    by = {(r["objective"], r["decoder"], r["perturbation"]): r for r in other.to_dicts()}
    assert by[("mle", "unbiased", "insertion 0.025")]["perplexity"] == "23.500"
    assert by[("mle", "unbiased", "no")]["ROUGE-2"] == "0.210 ± 0.022"
    assert by[("untrained (zero-shot)", "unbiased", "no")]["perplexity"] == "40.000"
    md = written["metrics"]
    assert (
        "**23.500**" in md and "**40.000**" not in md and "**0.800" not in md
    )  # perplexity: lower is best; distinct unranked


def test_a_single_decoder_keeps_the_tables_as_they_were(study, tmp_path):
    tables(study, str(tmp_path / "tables"), 0.025, ["test", "ood"])
    for name in ("table1", "strategies", "ablation"):
        assert "decoder" not in pl.read_csv(tmp_path / f"tables/{name}.csv").columns


def contrast_rows(family, metric, outcomes, **identity):
    """Contrast rows: outcomes = [(difference, p_holm)]."""
    rows = []
    for i, (difference, p_holm) in enumerate(outcomes):
        rows.append(
            {
                "family": family,
                "metric": metric,
                "model": "tiny",
                "dataset": "syn",
                "objective": "mle",
                "eval_set": f"set{i}",
                "decoder": "unbiased",
                "seed": 1,
                "a": identity.get("a", "insertion 0.025"),
                "b": identity.get("b", "no perturbation"),
                "difference": difference,
                "low": difference - 0.01,
                "high": difference + 0.01,
                "p": p_holm,
                "p_holm": p_holm,
                "significant": p_holm < 0.05,
                "favours": "perturbation" if difference > 0 else "no perturbation",
                "n": 5,
                # the workflow's own tests: the joint MAUVE test and the paired permutation test over prompts
                "method": identity.get("method", JOINT if metric == "mauve" else PERMUTATION),
            }
        )
    return rows


def test_summary_opens_with_findings_then_provenance_and_has_the_paired_comparisons(decoders, tmp_path):
    written = tables(decoders, str(tmp_path / "tables"), 0.025, ["test"])
    config = {"models": {"tiny": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}}
    rows = (
        contrast_rows("perturbation", "mauve", [(0.05, 0.01), (0.02, 0.2), (0.04, 0.03), (-0.01, 0.5)])
        + contrast_rows("ablation", "mauve", [(0.03, 0.01), (-0.02, 0.04)], a="TestPerturb", b="NoPerturb")
        + contrast_rows("perturbation", "rouge1", [(0.01, 0.01)])
    )
    contrasts = pl.DataFrame(rows, schema=COLUMNS, orient="row")
    text = summary(StudyResults(decoders, written, contrasts=contrasts), config, 0.025)
    head = text.split("## Headline table")[0]
    assert text.startswith("# Summary of the study\n\n## What this study found\n")
    assert text.index("## What this study found") < text.index("## Provenance") < text.index("## Headline table")
    assert "commit `c0ffee` (4 files); commit `beef` (dirty: uncommitted changes) (1 files)" in head
    assert "Warning: the metrics come from 2 different commits" in head
    assert "torch `2.13.0` (5 files)" in head and "mauve-text `0.4.0`" in head and "transformers `5.23.0`" in head
    assert "MAUVE featuriser: `gpt2-large` (5 files)" in head and "`5e7` (5 files)" in head
    assert "median 40% of the variance" in head
    assert "2 trained models and 1 untrained (zero-shot) models" in head  # a decoder is no model of its own
    paired = text.split("## Paired comparisons\n", 1)[1]
    assert text.index("## Ablation") < text.index("## Paired comparisons") < text.index("## Paper comparison")
    assert (
        "3 of 4 perturbation contrasts (MAUVE) favour perturbation; 2 of them are significant after Holm correction."
        in paired
    )
    assert "1 of 2 TestPerturb-vs-NoPerturb contrasts (MAUVE) favour perturbation; 1 of them are significant" in paired
    assert "✱ marks a contrast whose Holm-corrected p" in paired
    assert (
        "| tiny | mle | set0 | insertion 0.025 vs no perturbation | +0.050 [+0.040, +0.060] | 0.010 (fragile) | ✱ |  |"
        in paired
    )
    assert (
        "| tiny | mle | set1 | insertion 0.025 vs no perturbation | +0.020 [+0.010, +0.030] | 0.200 |  |  |" in paired
    )
    assert "## Paired comparisons" not in summary(StudyResults(decoders, written), config, 0.025)


def test_the_tables_cli_reads_contrasts(decoders, tmp_path, monkeypatch):
    import sys

    from workflow_lib.report import build

    decoders.write_csv(tmp_path / "metrics.csv")
    pl.DataFrame(contrast_rows("perturbation", "mauve", [(0.05, 0.01)]), schema=COLUMNS, orient="row").write_csv(
        tmp_path / "c.csv"
    )
    config = json.dumps({"models": {"tiny": {"source": "scratch"}}, "eval_sets": {}, "datasets": {}})
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "report",
            "tables",
            "--metrics",
            "metrics.csv",
            "--config",
            config,
            "--settings",
            json.dumps({"intensity": 0.025, "eval_order": ["test"]}),
            "--out-dir",
            "tables",
            "--summary",
            "summary.md",
            "--contrasts",
            "c.csv",
        ],
    )
    build.main()
    text = (tmp_path / "summary.md").read_text()
    assert "1 of 1 perturbation contrasts (MAUVE) favour perturbation; 1 of them" in text
    assert (tmp_path / "tables/metrics.md").exists()
