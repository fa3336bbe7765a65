"""The simulation study (paper Section 4): truth, perturbation law, batched training, metrics, workflow."""

from __future__ import annotations

import shutil

import numpy as np
import polars as pl
import pytest
from scipy import stats

from support.workflow_runs import planned_rules, snakemake, tiny_config, write_config
from workflow_lib.config import ConfigError
from workflow_lib.config_schema import check_schema
from workflow_lib.simulation.model import (
    ModelSettings,
    init_parameters,
    minibatch_gradients,
    minibatch_loss,
    torch_generator,
    train_bigrams,
)
from workflow_lib.simulation.study import (
    empirical_bigram,
    expand_baseline,
    mae_readings,
    perturbed_copy,
    results_table,
    sample_truth,
    synonym_table,
)
from workflow_lib.simulation.summary import markdown, summarize


def synonym_set(P, prev, nxt, factor=2.0):
    """S_t by the Supplement's definition, one occurrence at a time (the reference for the vectorised code)."""
    V = len(P)
    return {v for v in range(V) if P[prev, v] > factor / V and P[v, nxt] > factor / V}


def test_truth_rows_are_distributions_and_data_follow_the_bigram():
    rng = np.random.default_rng(0)
    M, x = sample_truth(12, 4000, 6, 0.5, rng)
    assert M.shape == (12, 12) and (M >= 0).all() and np.allclose(M.sum(1), 1.0)
    assert x.shape == (4000, 6) and x.min() >= 0 and x.max() < 12
    # Dirichlet(0.5) rows are skewed: most mass on few entries.
    assert np.mean(np.sort(M, axis=1)[:, -3:].sum(1)) > 0.5
    first = np.bincount(x[:, 0], minlength=12)
    assert stats.chisquare(first).pvalue > 1e-4  # uniform initial law
    counts = np.bincount((x[:, :-1] * 12 + x[:, 1:]).ravel(), minlength=144).reshape(12, 12)
    row = int(counts.sum(1).argmax())
    expected = M[row] * counts[row].sum()
    keep = expected > 5
    observed, expected = counts[row][keep], expected[keep] * counts[row][keep].sum() / expected[keep].sum()
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_empirical_bigram_normalises_seen_rows_and_zeroes_unseen_ones():
    x = np.array([[0, 1, 0, 2]])
    P = empirical_bigram(x, 4)
    assert np.allclose(P[0], [0, 0.5, 0.5, 0]) and np.allclose(P[1], [1, 0, 0, 0])
    assert (P[2] == 0).all() and (P[3] == 0).all()


@pytest.fixture(scope="module")
def perturbation_case():
    rng = np.random.default_rng(3)
    M, x = sample_truth(25, 3000, 8, 0.5, rng)
    return M, x, synonym_table(M, x, 2.0)


def test_synonym_sets_match_the_definition(perturbation_case):
    M, x, table = perturbation_case
    offsets, candidates = table.offsets, table.candidates
    k = 0
    for s in range(50):
        for t in range(1, x.shape[1] - 1):
            got = set(candidates[offsets[k] : offsets[k + 1]].tolist())
            assert got == synonym_set(M, x[s, t - 1], x[s, t + 1])
            k += 1


def test_intensity_zero_copies_the_data(perturbation_case):
    _M, x, table = perturbation_case
    copy, eligible, replaced, changed = perturbed_copy(x, table, 0.0, np.random.default_rng(1))
    assert np.array_equal(copy, x[:, :-1]) and replaced == 0 and changed == 0 and eligible > 0


def test_replacements_have_rate_alpha_and_stay_in_the_synonym_set(perturbation_case):
    M, x, table = perturbation_case
    alpha = 0.3
    copy, eligible, replaced, changed = perturbed_copy(x, table, alpha, np.random.default_rng(2))
    sd = np.sqrt(eligible * alpha * (1 - alpha))
    assert abs(replaced - alpha * eligible) < 4 * sd
    assert np.array_equal(copy[:, 0], x[:, 0])  # the first token has no X_{t-1}: never replaced
    diff = np.argwhere(copy != x[:, :-1])
    assert len(diff) == changed > 0
    for s, t in diff[:400]:
        assert copy[s, t] in synonym_set(M, x[s, t - 1], x[s, t + 1])
    # Occurrences with an empty set never change.
    empty = (np.diff(table.offsets) == 0).reshape(len(x), -1)
    assert np.array_equal(copy[:, 1:][empty], x[:, 1:-1][empty])
    _full, eligible_full, replaced_full, _ = perturbed_copy(x, table, 1.0, np.random.default_rng(2))
    assert replaced_full == eligible_full == eligible


def test_synonyms_are_drawn_proportionally_to_p_given_previous():
    V = 10
    P = np.full((V, V), 0.01)
    P[0, [3, 4, 5, 6]] = [0.4, 0.3, 0.22, 0.05]  # 6 is below 2/V = 0.2: never a synonym
    P[[3, 4, 5, 6], 1] = 0.9
    P[4, 1] = 0.21  # 4 -> 1 just above 2/V: still a synonym
    x = np.tile([0, 3, 1], (20000, 1))
    table = synonym_table(P, x, 2.0)
    copy, eligible, replaced, _ = perturbed_copy(x, table, 1.0, np.random.default_rng(5))
    assert eligible == replaced == 20000
    counts = np.bincount(copy[:, 1], minlength=V)[[3, 4, 5]]
    assert np.bincount(copy[:, 1], minlength=V).sum() == counts.sum()
    weights = np.array([0.4, 0.3, 0.22])
    assert stats.chisquare(counts, weights / weights.sum() * counts.sum()).pvalue > 1e-3


@pytest.mark.parametrize("masks", ["pair", "token"])
def test_hand_written_gradients_match_autograd(masks):
    import torch

    V, B, n = 9, 2, 40
    settings = ModelSettings(embedding_dim=5, hidden_dim=4, dropout=0.0, dropout_masks=masks)
    params = init_parameters(V, settings, [torch_generator(np.random.SeedSequence([b])) for b in range(B)])
    gen = torch.Generator().manual_seed(0)
    cond, target = torch.randint(V, (B, n), generator=gen), torch.randint(V, (B, n), generator=gen)
    ours = minibatch_gradients(params, cond, target, 8, settings, [])
    leaves = [p.clone().requires_grad_() for p in params]
    minibatch_loss(leaves, cond, target, 8).backward()
    for mine, leaf in zip(ours, leaves):
        torch.testing.assert_close(mine, leaf.grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("masks,unit", [("pair", "pairs"), ("token", "sequences")])
def test_batched_training_equals_training_each_replication_alone(masks, unit):
    V, rng = 15, np.random.default_rng(0)
    units, per_unit = (120, 1) if unit == "pairs" else (20, 6)
    cond = rng.integers(V, size=(3, units, per_unit))
    target = rng.integers(V, size=(3, units, per_unit))
    settings = ModelSettings(
        embedding_dim=8, hidden_dim=6, batch_size=50 if unit == "pairs" else 8, epochs=3, dropout_masks=masks
    )
    init = [np.random.SeedSequence([1, b]) for b in range(3)]
    train = [np.random.SeedSequence([2, b]) for b in range(3)]
    together = train_bigrams(cond, target, V, settings, init, train)
    assert together.shape == (3, V, V) and np.allclose(together.sum(-1), 1.0)
    for b in range(3):
        alone = train_bigrams(cond[b : b + 1], target[b : b + 1], V, settings, init[b : b + 1], train[b : b + 1])[0]
        # Batched matrix products may sum in another order: equal up to float32 rounding.
        np.testing.assert_allclose(together[b], alone, rtol=0, atol=1e-6)
    assert not np.allclose(together[0], together[1], atol=1e-3)  # different seeds and data: different fits
    again = train_bigrams(cond, target, V, settings, init, train)
    assert np.array_equal(together, again)


def test_mae_readings_on_a_hand_made_case():
    x = np.array([[0, 1, 0, 1]])  # pairs (0,1), (1,0), (0,1): token 2 never conditions
    M = np.array([[0.2, 0.8, 0.0], [0.5, 0.5, 0.0], [0.1, 0.1, 0.8]])
    M_hat = np.array([[0.3, 0.7, 0.0], [0.5, 0.4, 0.1], [0.4, 0.4, 0.2]])
    r = mae_readings(M_hat, M, x)
    assert r["n_unseen_rows"] == 1 and r["n_unseen_pairs"] == 7
    assert r["mae_unseen_rows"] == pytest.approx((0.3 + 0.3 + 0.6) / 3)
    unseen = [(0, 0), (0, 2), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    assert r["mae_unseen_pairs"] == pytest.approx(np.mean([abs(M_hat[c] - M[c]) for c in unseen]))
    assert r["mae_all"] == pytest.approx(np.abs(M_hat - M).mean())
    assert r["uniform_unseen_rows"] == pytest.approx(np.mean(np.abs(1 / 3 - M[2])))


def test_empty_reading_a_is_flagged_not_a_number(tmp_path):
    x = np.array([[0, 1, 2, 0]])  # every token conditions once
    M = np.full((3, 3), 1 / 3)
    r = mae_readings(M, M, x)
    assert r["n_unseen_rows"] == 0 and r["mae_unseen_rows"] is None and r["uniform_unseen_rows"] is None
    rows = []
    for rep in range(3):
        for alpha in (0.0, 0.5):
            rows.append(
                {
                    "vocab_size": 3,
                    "replication": rep,
                    "arm": "none" if alpha == 0 else "oracle",
                    "intensity": alpha,
                    "n_eligible": 4,
                    "n_replaced": 2,
                    "n_changed": 1,
                    "n_unseen_rows_perturbed": 0,
                    "mean_synonyms": 1.0,
                    **r,
                    "mae_unseen_pairs": 0.1 + 0.01 * rep - 0.02 * alpha,
                }
            )
    summary = summarize(results_table(expand_baseline(rows, ["oracle"])))
    top = summary.filter(pl.col("intensity") == 0.5).row(0, named=True)
    assert top["mae_unseen_rows_mean"] is None and top["n_unseen_rows_reps"] == 0
    assert top["diff_unseen_pairs_mean"] == pytest.approx(-0.01)
    assert top["diff_unseen_pairs_2se"] == pytest.approx(0.0, abs=1e-12)  # the same shift in every replication
    assert top["mae_unseen_pairs_2se"] == pytest.approx(2 * 0.01 / np.sqrt(3))
    assert "| n/a |" in markdown(summary)
    from workflow_lib.simulation.figure import simulation_figure

    simulation_figure(summary, str(tmp_path / "fig"))
    assert (tmp_path / "fig.png").stat().st_size > 0 and (tmp_path / "fig.pdf").stat().st_size > 0


def readings_summary(rules: list[str], control: bool = False) -> pl.DataFrame:
    """A summary over two vocabulary sizes with both readings non-empty, one line per synonym rule (and the
    shrinkage control's level with `control`)."""
    M = np.full((3, 3), 1 / 3)
    r = mae_readings(M, M, np.array([[0, 1, 0, 1]]))  # token 2 never conditions: reading (a) has a row
    rows = [
        {
            "vocab_size": V,
            "replication": rep,
            "arm": "none" if alpha == 0 else rule,
            "intensity": alpha,
            "n_eligible": 4,
            "n_replaced": 2,
            "n_changed": 1,
            "n_unseen_rows_perturbed": 1,
            "mean_synonyms": 1.0,
            **r,
            "mae_unseen_pairs": 0.1 + 0.01 * rep - 0.02 * alpha,
        }
        for V in (3, 4)
        for rep in range(3)
        for rule in rules
        for alpha in (0.0, 0.5)
    ]
    controls = [
        {**rows[0], "vocab_size": V, "replication": rep, "arm": "shrinkage", "intensity": None, "shrinkage": 0.2}
        | {"mae_unseen_pairs": 0.09 + 0.01 * rep}
        for V in (3, 4)
        for rep in range(3)
        if control
    ]
    return summarize(results_table(expand_baseline(rows, rules) + controls))


def test_figure_tells_the_rules_apart_by_colour_and_dashes(monkeypatch):
    """Was black and dim gray lines: each synonym rule now has a colour-blind-safe palette style, fixed by its
    name, so a study running only `empirical` draws it as one running both does; the shrinkage control is a
    blue dash-dot level (it has no intensity); the uniform line is gray."""
    from matplotlib.colors import to_hex

    from workflow_lib.plotting import PALETTE, line_style
    from workflow_lib.simulation import figure

    saved = []
    monkeypatch.setattr(figure, "_save", lambda fig, stem: saved.append(fig))
    figure.simulation_figure(readings_summary(["oracle", "empirical"], control=True), "unused")
    figure.simulation_figure(readings_summary(["empirical"]), "unused")
    both, alone = saved
    for ax in both.axes:
        lines = [line for line in ax.get_lines() if line.get_linestyle() != "None"]  # not the error bars' caps
        assert 0 < len(lines) <= 5
        cues = [(to_hex(line.get_color()), line.get_linestyle()) for line in lines]
        assert len(set(cues)) == len(cues) == 4  # oracle, empirical, shrinkage, uniform
        colours = {c.get_label(): to_hex(c.lines[0].get_color()) for c in ax.containers}  # errorbars: the rules
        colours |= {
            line.get_label(): to_hex(line.get_color()) for line in lines if not line.get_label().startswith("_")
        }
        assert colours["oracle"] == to_hex(line_style(0)["color"]) and colours["empirical"] == to_hex(
            line_style(1)["color"]
        )
        assert colours[figure.CONTROL_LABEL] == to_hex(line_style(2)["color"])
        assert colours["uniform 1/|V|"] not in {to_hex(c) for c in PALETTE}
    assert {to_hex(c.lines[0].get_color()) for ax in alone.axes for c in ax.containers} == {
        to_hex(line_style(1)["color"])
    }
    legend = [text.get_text() for text in both.legends[0].get_texts()]
    assert legend == ["oracle", "empirical", figure.CONTROL_LABEL, "uniform 1/|V|"]


def test_a_uniform_line_far_off_the_data_becomes_a_note(monkeypatch):
    """At |V| = 50 the uniform predictor's MAE is about 2.5 times the models': drawn as a line it would squash the
    curves into a band, so the panel names its value instead (and keeps it in the legend)."""
    from workflow_lib.simulation import figure

    saved = []
    monkeypatch.setattr(figure, "_save", lambda fig, stem: saved.append(fig))
    summary = readings_summary(["oracle"]).with_columns(uniform_unseen_pairs_mean=pl.lit(5.0))
    figure.simulation_figure(summary, "unused")
    bottom = saved[0].axes[-1]
    notes = [t.get_text() for t in bottom.texts]
    assert any("uniform 1/|V| = 5.0000" in n and "off this panel's scale" in n for n in notes)
    assert bottom.get_ylim()[1] < 1.0  # the curves' scale, not the uniform value's
    assert "uniform 1/|V|" in bottom.get_legend_handles_labels()[1]


def test_schema_requires_the_baseline_intensity():
    config = tiny_config()
    config["simulation"] = {"intensities": [0.1, 0.2]}
    with pytest.raises(ConfigError, match="simulation.intensities"):
        check_schema(config)
    config["simulation"] = {"synonyms": ["thesaurus"]}
    with pytest.raises(ConfigError, match="simulation.synonyms"):
        check_schema(config)


SIM_TARGETS = [
    "results/simulation/summary.csv",
    "results/simulation/summary.md",
    "results/simulation/figure.png",
    "results/simulation/figure.pdf",
]


@pytest.mark.workflow
def test_simulation_rules_run_and_are_reproducible(workdir):
    config = tiny_config()
    config["simulation"] = {
        "enabled": True,
        "vocab_sizes": [6, 80],
        "intensities": [0, 0.5],
        "replications": 3,
        "n_sequences": 20,
        "seq_len": 6,
        "epochs": 2,
        "batch_size": 50,
        "synonyms": ["oracle", "empirical"],
        "heldout_sequences": 20,
    }
    write_config(workdir, config)
    first = snakemake(workdir, *SIM_TARGETS)
    assert first.returncode == 0, first.stderr
    results = workdir / "results"
    fits = pl.read_parquet(results / "simulation/V80.parquet")
    # replications x rules x intensities (the baseline listed under each rule), and the control once per replication
    assert fits.height == 3 * 2 * 2 + 3
    control = fits.filter(pl.col("arm") == "shrinkage")
    assert control["intensity"].is_null().all() and control["shrinkage"].is_between(0, 1).all()
    assert fits["heldout_nll"].is_finite().all()
    assert (fits["n_unseen_rows"] > 0).all()  # 80 tokens, 100 pairs: many never condition
    small = pl.read_parquet(results / "simulation/V6.parquet")
    assert (small["n_unseen_rows"] == 0).all() and small["mae_unseen_rows"].is_null().all()
    summary = pl.read_csv(results / "simulation/summary.csv")
    assert summary.height == 2 * (2 * 2 + 1) and {"mae_unseen_rows_mean", "diff_unseen_pairs_2se"} <= set(
        summary.columns
    )
    assert "n/a" in (results / "simulation/summary.md").read_text()
    tests = pl.read_csv(results / "simulation/tests.csv")
    assert set(tests["kind"]) == {"panel", "vs unperturbed", "vs uniform", "contrast"}
    log_loss = tests.filter(pl.col("metric") == "heldout_nll")
    assert set(log_loss["kind"]) == {"panel"} and log_loss.height == 2 * 2  # per |V|: each rule at alpha = 0.5
    assert (fits.filter(pl.col("arm") == "empirical")["n_unseen_pairs_reached"] == 0).all()
    conclusions = (results / "simulation/conclusions.md").read_text()
    assert "|V| = 80" in conclusions and "Against the regulariser" in conclusions
    assert "|V| = 80, held-out log-loss (" in conclusions
    assert "|V| = 80: the empirical synonyms' perturbed copy held none of D's" in conclusions
    assert "### Held-out log-loss per arm and intensity" in (results / "simulation/summary.md").read_text()
    assert (results / "simulation/figure.png").exists() and (results / "logs/simulation/V80.log").exists()

    def outputs():
        return {
            p.name: p.read_bytes()
            for p in (results / "simulation").iterdir()
            if p.suffix in (".parquet", ".csv", ".md", ".png", ".pdf")
        }

    produced = outputs()
    shutil.rmtree(results / "simulation")
    second = snakemake(workdir, *SIM_TARGETS)
    assert second.returncode == 0, second.stderr
    assert outputs() == produced

    config["simulation"]["epochs"] = 3
    write_config(workdir, config)
    plan = snakemake(workdir, *SIM_TARGETS, "-n", "--quiet", "rules")
    text = plan.stdout + plan.stderr
    assert plan.returncode == 0, text
    assert planned_rules(text) == {"simulation_fit", "simulation_summary"}
