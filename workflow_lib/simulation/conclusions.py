"""The simulation study's conclusions as plain sentences (`conclusions.md`), generated from the paired tests
(statistics.py) and what each rule's perturbed copy reaches.

Each sentence names its |V| and its numbers (the mean difference, its 95% t interval, Holm's p, and where nothing
was detected the smallest difference the test could have seen, with no direction). The order is the referee's
question: the uniform baseline, whether the gain survives without the oracle, against the regulariser, how much the
oracle adds, the fixed-alpha panels, the held-out tuning, the held-out log-loss, and the unseen pairs each copy
reaches; where the `empirical` copy reached none, its sentence says a null there is what the construction predicts.
docs/method.md §5; docs/theory.md, "The simulation study".
"""

from __future__ import annotations

import numpy as np
import polars as pl

from workflow_lib.simulation.statistics import (
    CONTRAST,
    CONTROL,
    LEVEL,
    MAE,
    NLL,
    PANEL,
    POWER,
    RULES,
    UNIFORM,
    UNPERTURBED,
    VS_UNIFORM,
    VS_UNPERTURBED,
    tuned,
)


def label(name: str) -> str:
    """An estimator's name in a sentence."""
    if name == UNPERTURBED:
        return "the unperturbed model (α = 0)"
    if name == CONTROL:
        return "shrinkage toward uniform (λ tuned on held-out data)"
    if name == UNIFORM:
        return "the uniform predictor"
    rule, _, alpha = name.partition(", ")
    return f"{rule} synonyms ({alpha} on held-out data)" if alpha == "α tuned" else f"{rule} synonyms at {alpha}"


def number(x: float, sign: bool = True, digits: int = 2) -> str:
    """`digits` significant digits, positional (MAE differences are ~1e-4: '-0.00025', not '-2.5e-04'); a
    difference carries its sign, a mean or an MDE does not."""
    return np.format_float_positional(x, precision=digits, unique=True, fractional=False, trim="-", sign=sign)


def p_value(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def relative(row: dict) -> str:
    """The difference as a share of b's mean MAE (nonzero), ' -5.9% of the unperturbed MAE': what a reader compares
    sizes with."""
    share = np.format_float_positional(
        100 * row["difference"] / row["b_mean"], precision=2, fractional=False, trim="-", sign=True
    )
    whose = {UNPERTURBED: "the unperturbed", UNIFORM: "the uniform predictor's", CONTROL: "shrinkage's"}
    name = whose.get(row["b"], row["b"].replace(",", "") + "'s")
    return f" {share}% of {name} {score(row)}"


def score(row: dict) -> str:
    """The score a test row compares: 'MAE' (on unseen pairs) or 'log-loss' (held-out)."""
    return "log-loss" if row.get("metric") == NLL else "MAE"


def evidence(row: dict) -> str:
    """'difference +0.000348 ± 0.0000064 (95% CI; +29% of the uniform predictor's MAE), p_holm = 2.5e-201': the
    mean to three significant digits, the t interval's half-width to two (the interval is symmetric), the share of
    b's mean MAE (b: the comparison's second estimator), and the MDE when nothing was marked."""
    if row["verdict"] == "identical":
        return f"the same estimate in all {row['n']} replications: nothing to test"
    if row["p"] is None:
        return f"difference {number(row['difference'], digits=3)} over {row['n']} replication(s): untested"
    half = number((row["high"] - row["low"]) / 2, sign=False)
    share = f";{relative(row)}" if row["b_mean"] else ""
    text = (
        f"difference {number(row['difference'], digits=3)} ± {half} (95% CI{share}), p_holm = {p_value(row['p_holm'])}"
    )
    if row["verdict"] == "not detected":
        text += f"; the smallest difference it could detect at {POWER:.0%} power: ±{number(row['mde'], sign=False)}"
    return text


def mae(row: dict, side: str = "a") -> str:
    return f"MAE {number(row[f'{side}_mean'], sign=False, digits=3)}"


def verdict(row: dict, lower: str, higher: str, neither: str) -> str:
    """The words for a row's verdict; `neither` for a difference not detected (or not testable)."""
    return {"a lower": lower, "a higher": higher}.get(row["verdict"], neither)


def tuned_clause(row: dict | None, lower: str, higher: str, same: str) -> str:
    """'; with α tuned on held-out data: <lower | higher | no difference detected> (evidence)' for the tuned
    arm's row of the same comparison; `same` where its estimates equal the other side's in every replication."""
    if row is None:
        return ""
    if row["verdict"] == "identical":
        return f"; with α tuned on held-out data, {same}"
    return f"; with α tuned on held-out data: {verdict(row, lower, higher, 'no difference detected')} ({evidence(row)})"


def agrees(name: str, singular: str, plural: str) -> str:
    """The verb form for an estimator as subject: synonyms are plural, the model and the control singular."""
    return singular if name in (UNPERTURBED, CONTROL, UNIFORM) else plural


ALPHA_ZERO = "the held-out data chose α = 0 in every replication: the unperturbed model itself"


class Tests:
    """The test table of one |V| and one metric, looked up by (kind, a, b); `reach`: each rule's largest count of
    unseen pairs its copy reached at this |V| (reach_summary), None where not measured."""

    def __init__(self, tests: pl.DataFrame, vocab: int, metric: str = MAE, reach: pl.DataFrame | None = None):
        self.vocab = vocab
        mine = tests.filter(pl.col("vocab_size") == vocab)
        if "metric" in tests.columns:
            mine = mine.filter(pl.col("metric") == metric)
        self.rows = {(r["kind"], r["a"], r["b"]): r for r in mine.to_dicts()}
        self.reach: dict[str, int] = {}
        if reach is not None:
            for r in reach.filter(pl.col("vocab_size") == vocab).iter_rows(named=True):
                self.reach[r["arm"]] = max(self.reach.get(r["arm"], 0), r["reached_max"])
        panels = [r for r in self.rows.values() if r["kind"] == PANEL]
        self.strongest: dict[str, str] = {}  # rule -> its arm at the largest intensity
        for rule in RULES:
            arms = [r for r in panels if r["a"].startswith(f"{rule},")]
            if arms:
                self.strongest[rule] = max(arms, key=lambda r: r["intensity"])["a"]

    def get(self, kind: str, a: str | None, b: str | None) -> dict | None:
        return self.rows.get((kind, a, b)) if a and b else None


def uniform_sentences(t: Tests) -> list[str]:
    out = []
    base = t.get(VS_UNIFORM, UNPERTURBED, UNIFORM)
    if base:
        words = verdict(base, "is better than", "is worse than", "cannot be told apart from")
        out.append(
            f"|V| = {t.vocab}: the trained model without perturbation {words} the uniform predictor on unseen pairs "
            f"({mae(base)} vs {number(base['b_mean'], sign=False, digits=3)}; {evidence(base)})."
        )
    clauses = []
    for arm in [*t.strongest.values(), CONTROL]:
        row = t.get(VS_UNIFORM, arm, UNIFORM)
        if row:
            words = verdict(
                row,
                agrees(arm, "beats it", "beat it"),
                agrees(arm, "is worse", "are worse"),
                agrees(arm, "cannot be told apart from it", "cannot be told apart from it"),
            )
            clauses.append(f"{label(arm)} {words} ({mae(row)}; {evidence(row)})")
    if clauses and base:
        out.append(
            f"|V| = {t.vocab}, against the uniform predictor on unseen pairs "
            f"(MAE {number(base['b_mean'], sign=False, digits=3)}): {'; '.join(clauses)}."
        )
    return out


def gain_sentences(t: Tests) -> list[str]:
    out = []
    oracle = t.get(PANEL, t.strongest.get("oracle"), UNPERTURBED)
    if oracle:
        words = verdict(oracle, "lower", "raise", "do not detectably change")
        out.append(
            f"|V| = {t.vocab}: {label(oracle['a'])} {words} the MAE on unseen pairs against the unperturbed model "
            f"({evidence(oracle)})"
            f"{tuned_clause(t.get(VS_UNPERTURBED, tuned('oracle'), UNPERTURBED), 'lower', 'higher', ALPHA_ZERO)}."
        )
    empirical = t.get(PANEL, t.strongest.get("empirical"), UNPERTURBED)
    if empirical:
        head = verdict(
            empirical,
            f"Perturbation's gain on unseen pairs survives without the oracle at |V| = {t.vocab}",
            f"Perturbation without the oracle raises the MAE on unseen pairs at |V| = {t.vocab}",
            f"Perturbation's gain on unseen pairs is not detected without the oracle at |V| = {t.vocab}",
        )
        out.append(
            f"{head}: {label(empirical['a'])} against the unperturbed model ({evidence(empirical)})"
            f"{tuned_clause(t.get(VS_UNPERTURBED, tuned('empirical'), UNPERTURBED), 'lower', 'higher', ALPHA_ZERO)}"
            f"{unreached_clause(t, empirical)}."
        )
    control = t.get(VS_UNPERTURBED, CONTROL, UNPERTURBED)
    if control:
        words = verdict(control, "lowers", "raises", "does not detectably change")
        out.append(
            f"|V| = {t.vocab}: {label(CONTROL)} {words} the MAE on unseen pairs against the unperturbed model "
            f"({evidence(control)}; no perturbation, no synonyms)."
        )
    return out


def unreached_clause(t: Tests, row: dict) -> str:
    """For the empirical arm whose copy reached no unseen pair in any replication and intensity (measured): what its
    result on unseen pairs can and cannot say. Empty where the count was not measured or is not 0."""
    if t.reach.get("empirical") != 0:
        return ""
    if row["verdict"] in ("a lower", "a higher"):
        return (
            ". Its perturbed copy held no unseen pair of D as a training pair (0 in every replication and intensity), "
            "so this change reaches the unseen pairs only through the seen pairs the copy reweights"
        )
    return (
        ". A null result the construction predicts: its perturbed copy held no unseen pair of D as a training pair (0 "
        "in every replication and intensity), so it cannot reach unseen pairs, only reweight the seen ones, and this "
        "null is no evidence against a perturbation that does reach them"
    )


def contrast_sentences(t: Tests) -> list[str]:
    out = []
    for rule in ("empirical", "oracle"):
        row = t.get(CONTRAST, t.strongest.get(rule), CONTROL)
        if not row:
            continue
        a = label(row["a"])
        body = verdict(
            row,
            f"{a} beat {label(CONTROL)} on unseen pairs",
            f"{label(CONTROL)} beats {a} on unseen pairs",
            f"no difference between {a} and {label(CONTROL)} on unseen pairs is detected",
        )
        out.append(
            f"Against the regulariser at |V| = {t.vocab}: {body} ({rule} minus shrinkage: {evidence(row)})"
            f"{tuned_clause(t.get(CONTRAST, tuned(rule), CONTROL), f'{rule} better', 'shrinkage better', 'the same')}."
        )
    row = t.get(CONTRAST, t.strongest.get("oracle"), t.strongest.get("empirical"))
    same_alpha = t.get(CONTRAST, tuned("oracle"), tuned("empirical"))
    if row:
        alpha = row["a"].partition(", ")[2]
        body = verdict(
            row,
            "oracle synonyms beat empirical ones on unseen pairs, by what reading the true M adds",
            "empirical synonyms beat oracle ones on unseen pairs",
            "no difference between oracle and empirical synonyms on unseen pairs is detected",
        )
        out.append(
            f"Oracle against empirical at |V| = {t.vocab}, both at {alpha}: {body} (oracle minus empirical: "
            f"{evidence(row)})"
            f"{tuned_clause(same_alpha, 'oracle better', 'empirical better', 'both chose α = 0 in every replication')}."
        )
    return out


def panel_sentences(t: Tests) -> list[str]:
    out = []
    what = "held-out log-loss" if any(r.get("metric") == NLL for r in t.rows.values()) else "unseen pairs"
    name = "log-loss" if what == "held-out log-loss" else "MAE"
    for rule in RULES:
        rows = sorted(
            (r for r in t.rows.values() if r["kind"] == PANEL and r["a"].startswith(f"{rule},")),
            key=lambda r: r["intensity"],
        )
        if not rows:
            continue
        parts = []
        for key, words in (
            ("a lower", f"lower {name}"),
            ("a higher", f"higher {name}"),
            ("not detected", "no difference detected"),
            ("identical", "the same estimate"),
            ("untested", "untested"),
        ):
            alphas = [f"{r['intensity']:g}" for r in rows if r["verdict"] == key]
            if alphas:
                parts.append(f"{words} at α = {', '.join(alphas)}")
        out.append(
            f"|V| = {t.vocab}, {rule} synonyms at each fixed α against the unperturbed model on {what}: "
            f"{'; '.join(parts)} (Holm-corrected, marked at {LEVEL:g})."
        )
    return out


def log_loss_sentences(t: Tests) -> list[str]:
    """Each rule at the largest α against the unperturbed model on the held-out log-loss (a proper score, over every
    held-out pair), with the unperturbed model's and the uniform predictor's log-loss as the scale."""
    clauses, base = [], None
    for rule in RULES:
        row = t.get(PANEL, t.strongest.get(rule), UNPERTURBED)
        if row:
            base = row["b_mean"]
            words = verdict(row, "lower it", "raise it", "do not detectably change it")
            clauses.append(f"{label(row['a'])} {words} ({evidence(row)})")
    if not clauses or base is None:
        return []
    sentence = (
        f"|V| = {t.vocab}, held-out log-loss (negative log-likelihood per pair of held-out sequences from the truth, "
        f"a proper score; the unperturbed model's mean {number(base, sign=False, digits=4)} nats, the uniform "
        f"predictor's log |V| = {np.log(t.vocab):.4f}): {'; '.join(clauses)}."
    )
    return [sentence]


def reach_sentences(reach: pl.DataFrame) -> list[str]:
    """Per |V| and rule: how many of D's unseen pairs the perturbed copy held as training pairs, at its largest α;
    for a rule whose copy held none at any α, that it cannot reach them (what the construction guarantees for
    `empirical`, measured here)."""
    out = []
    for (vocab, rule), part in reach.group_by(["vocab_size", "arm"], maintain_order=True):
        top = part.sort("intensity").row(-1, named=True)
        unseen = f"{top['unseen_pairs_mean']:,.0f}"
        if part["reached_max"].max() == 0:
            out.append(
                f"|V| = {vocab}: the {rule} synonyms' perturbed copy held none of D's {unseen} unseen pairs (mean over "
                f"{top['replications']} replications) as a training pair, in every replication at every α > 0: it "
                f"cannot reach unseen pairs, so whatever it does to them goes through the seen pairs it reweights."
            )
            continue
        mean = top["reached_mean"]
        reached = f"{mean:,.0f}" if mean >= 100 else number(mean, sign=False, digits=2)
        out.append(
            f"|V| = {vocab}: the {rule} synonyms' perturbed copy at α = {top['intensity']:g} held {reached} of D's "
            f"{unseen} unseen pairs as training pairs on average over {top['replications']} replications "
            f"({number(100 * top['reached_share'], sign=False, digits=2)}%; at most {top['reached_max']:,} in one)."
        )
    return out


def tuning_sentences(tuning: pl.DataFrame) -> list[str]:
    out = []
    for row in tuning.iter_rows(named=True):
        parts = []
        if row.get("lambda_mean") is not None:
            parts.append(f"λ = {row['lambda_mean']:.3f} on average")
        for rule in RULES:
            if row.get(f"alpha_{rule}_mean") is not None:
                parts.append(
                    f"{rule} α = {row[f'alpha_{rule}_mean']:.2f} on average (α = 0 in "
                    f"{row[f'alpha_{rule}_zero']} of {row['replications']} replications)"
                )
        if parts:
            out.append(f"|V| = {row['vocab_size']}: the held-out sequences chose {'; '.join(parts)}.")
    return out


def conclusions(tests: pl.DataFrame, tuning: pl.DataFrame, reach: pl.DataFrame | None = None) -> list[str]:
    """Every sentence, grouped by question, |V| ascending within each. `tests` may hold both metrics (study_tests):
    the MAE family's rows answer the questions, the log-loss family's get sentences of their own; `reach`
    (reach_summary) adds what each copy reaches and labels the empirical arm's result by it."""
    vocabs = sorted(tests["vocab_size"].unique().to_list())
    per_vocab = [Tests(tests, vocab, MAE, reach) for vocab in vocabs]
    out: list[str] = []
    for make in (uniform_sentences, gain_sentences, contrast_sentences, panel_sentences):
        for t in per_vocab:
            out += make(t)
    out += tuning_sentences(tuning)
    if "metric" in tests.columns:
        log_loss = [Tests(tests, vocab, NLL) for vocab in vocabs]
        for make in (log_loss_sentences, panel_sentences):
            for t in log_loss:
                out += make(t)
    return out + ([] if reach is None else reach_sentences(reach))
