"""Which conditions a study compares: the designed pairs of its tables, from its result paths alone.

The grid (workflow_lib/grid.py) names a study's conditions as output paths; this module decides which two of them
each table compares (`pairs`: perturbation or none, each objective against MLE, each strategy's ablation arms
against NoPerturb; with `report.aa_null`, `null_pairs`), and report.contrasts computes the statistics. The plan reads
it at Snakefile parse time (one `mauve_contrast` job per designed MAUVE pair, `inputs.mauve_contrasts`), so it is
standard library only (tests/common/test_parse_imports.py). Which pairs each table holds: docs/output.md, "Paired
comparisons"; docs/method.md §4, "Each contrast once" and "The A/A null".
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from typing import Any

from workflow_lib.constants import PAPER_STRATEGY, UNTRAINED
from workflow_lib.layout import EVALUATION_NAMES, NO_STRATEGY, RUN_NAMES, parse
from workflow_lib.perturb.strategies import get as get_strategy
from workflow_lib.sample.modes import get as get_mode

MODEL_KEYS = RUN_NAMES
KEYS = EVALUATION_NAMES
# The result files a contrast reads: of samples, and of a model alone (its perplexity; its lm-evaluation-harness task
# scores, report/harness.py, the task in the eval set's place), whose pairs see no sampling condition.
MODEL_KINDS = ("perplexity", "lm_eval")
KINDS = ("metrics", "extrapolation", *MODEL_KINDS)
RESAMPLES = 2000  # the least B of a permutation table; a table of m comparisons gets max(RESAMPLES, 200 m)
# A table of m comparisons is Holm-corrected, which multiplies its smallest p by m. B random swaps resolve a p down
# to 1/(B + 1), so B >= 200 m lets the table's smallest adjusted p reach m/(B + 1) < 0.01.
RESAMPLES_PER_COMPARISON = 200
NULL = "null"  # the A/A null's family (`null_pairs`): one method against itself, over disjoint training seeds
NULL_SEEDS = ", seeds "  # in a null arm's label, between the condition's name and the half's seeds (`null_arm`)


def mode_label(mode: str) -> str:
    """How tables and findings name a sampling mode (sample/modes.py): one that is not Algorithm 2's law (`cached`, an
    estimator of its own; docs/method.md §1, "Sampling") says so in every label, whether or not the study has other
    modes."""
    return get_mode(mode).shown


def resamples_for(comparisons: int, minimum: int) -> int:
    """B for a Holm table of `comparisons` rows: at least `minimum`, and enough that a row that no swap reaches
    keeps an adjusted p of at most 0.01 (see RESAMPLES_PER_COMPARISON)."""
    return max(int(minimum), RESAMPLES_PER_COMPARISON * int(comparisons))


def parse_path(path: str) -> dict:
    """The condition a metrics, extrapolation or perplexity path names (the report's columns), and its kind."""
    try:
        located = parse(path)
    except ValueError:
        located = None
    if located is None or located.kind not in KINDS or located.eval_set is None or located.suffix != ".json":
        raise ValueError(f"{path}: not a metrics, extrapolation, perplexity or lm_eval path of this workflow")
    return {"kind": located.kind, **located.columns()}


def typed_condition(row: dict) -> dict:
    """A condition's intensities as floats, copies and seed as integers (the rest are names; None stays None)."""
    floats, ints = ("train_intensity", "test_intensity"), ("copies", "seed")
    return {k: (None if v is None else float(v) if k in floats else int(v) if k in ints else v) for k, v in row.items()}


def condition_rows(paths: Iterable[str]) -> list[dict]:
    """One row per metrics, extrapolation or perplexity file: its condition (perplexity rows have no sampling fields),
    kind and path, typed; the other files are skipped."""
    rows = [parse_path(p) | {"path": str(p)} for p in paths]
    return [typed_condition({k: r.get(k) for k in ["kind", *KEYS, "path"]}) for r in rows if r["kind"] in KINDS]


def _variants(rows: list[dict]) -> list[str]:
    """The condition fields that take more than one value in this study: labels must name them."""
    perturbed_train = [r for r in rows if r["train_intensity"] > 0]
    perturbed_test = [r for r in rows if (r["test_intensity"] or 0) > 0]
    # synonyms vary only among the strategies that read a table (the embedding space's name none)
    with_synonyms = {
        "train_synonyms": [r for r in perturbed_train if r["train_synonyms"] != NO_STRATEGY],
        "test_synonyms": [r for r in perturbed_test if r["test_synonyms"] != NO_STRATEGY],
    }
    trained = [r for r in rows if r["objective"] != UNTRAINED]  # an untrained model has no training mode
    varying = []
    for field, among in (
        ("train_synonyms", with_synonyms["train_synonyms"]),
        ("train_mode", trained),
        ("copies", trained),
        ("test_synonyms", with_synonyms["test_synonyms"]),
        ("test_mode", perturbed_test),
    ):
        if len({r[field] for r in among}) > 1:
            varying.append(field)
    return varying


def _label(name: str, row: dict, varying: list[str]) -> str:
    parts = []
    if "train_synonyms" in varying and row["train_intensity"] > 0 and row["train_synonyms"] != NO_STRATEGY:
        parts.append(f"train {row['train_synonyms']}")
    if "train_mode" in varying or "copies" in varying:
        parts.append(f"{row['train_mode']}-m{row['copies']}")
    if row.get("test_intensity") and "test_synonyms" in varying and row["test_synonyms"] != NO_STRATEGY:
        parts.append(f"sample {row['test_synonyms']}")
    if row.get("test_intensity") and ("test_mode" in varying or not get_mode(row["test_mode"]).algorithm2):
        parts.append(mode_label(row["test_mode"]))
    return name + (f" ({', '.join(parts)})" if parts else "")


def _pair(arms: list[dict], baselines: list[dict], match: list[str]) -> list[tuple[dict, dict]]:
    index = defaultdict(list)
    for b in baselines:
        index[tuple(b[k] for k in match)].append(b)
    return [(a, b) for a in arms for b in index.get(tuple(a[k] for k in match), [])]


def pairs(conditions: Iterable[dict] | Any, intensity: float, null: bool = False) -> list[dict]:
    """Every designed comparison of the study: family, identity, the two arms' labels and files. `conditions`: the
    rows of `condition_rows` (or a frame of them, as report.contrasts builds it). `null` (`report.aa_null`): the A/A
    null family too (`null_pairs`)."""
    rows = conditions.to_dicts() if hasattr(conditions, "to_dicts") else list(conditions)
    varying = _variants(rows)
    # Sampled conditions: the metrics of samples and the exact TV of the model's perturbed law (builtin eval sets),
    # compared alike; `kind` is in every match, so a pair never mixes them.
    sampled = [r for r in rows if r["kind"] in ("metrics", "extrapolation")]
    models = [r for r in rows if r["kind"] in MODEL_KINDS]

    def headline(r, side):
        return r[f"{side}_strategy"] == PAPER_STRATEGY and r[f"{side}_intensity"] == intensity

    def plain(r, side):
        return r[f"{side}_intensity"] == 0

    def in_table1(r, sides):
        return all(plain(r, s) for s in sides) or all(headline(r, s) for s in sides)

    def method_name(r):
        return "no perturbation" if plain(r, "train") else f"insertion {intensity:g}"

    out = []

    def add(family, a, b, a_label, b_label):
        out.append(
            {
                "family": family,
                "model": a["model"],
                "dataset": a["dataset"],
                "objective": a["objective"],
                "eval_set": a["eval_set"],
                "decoder": a.get("decoder") or "",
                "seed": a["seed"],
                "a": _label(a_label, a, varying),
                "b": _label(b_label, b, varying),
                "kind": a["kind"],
                "path_a": a["path"],
                "path_b": b["path"],
            }
        )

    # What two arms of the perturbation and ablation families share: everything but the perturbation (and
    # the decoder, for perplexity, which does not sample).
    same_model = ["kind", "model", "dataset", "objective", "eval_set", "seed", "train_mode", "copies"]
    # Perturbation (Table 1): both sides at the headline intensity against intensity 0 at both.
    for items, sides, match in (
        (sampled, ("train", "test"), [*same_model, "decoder"]),
        (models, ("train",), same_model),
    ):
        arms = [r for r in items if all(headline(r, s) for s in sides)]
        base = [r for r in items if all(plain(r, s) for s in sides)]
        for a, b in _pair(arms, base, match):
            add("perturbation", a, b, f"insertion {intensity:g}", "no perturbation")
    # Ablation: each one-sided arm against NoPerturb (sampled conditions only: perplexity does not see sampling).
    # Both against NoPerturb is the perturbation family's contrast: counted there once, not a second time here.
    match = [*same_model, "decoder"]
    arm_of = {(True, False): "TrainPerturb", (False, True): "TestPerturb", (True, True): "Both"}
    base = [r for r in sampled if plain(r, "train") and plain(r, "test")]
    for strategy in ablation_strategies(sampled):
        at = arm_intensity(strategy, intensity)

        def on(r, side, strategy=strategy, at=at):
            return r[f"{side}_strategy"] == strategy and r[f"{side}_intensity"] == at

        arms = [
            r
            for r in sampled
            if (on(r, "train") or on(r, "test"))
            and all(on(r, s) or plain(r, s) for s in ("train", "test"))
            and not (strategy == PAPER_STRATEGY and on(r, "train") and on(r, "test"))  # the perturbation family's
        ]
        prefix = "" if strategy == PAPER_STRATEGY else f"{strategy}: "
        for a, b in _pair(arms, base, match):
            add("ablation", a, b, prefix + arm_of[(on(a, "train"), on(a, "test"))], "NoPerturb")
    # Objectives: each against MLE in Table 1's two conditions; untrained models are no objective.
    for items, sides, keys in (
        (sampled, ("train", "test"), ["kind", *KEYS]),
        (models, ("train",), MODEL_KEYS + ["eval_set"]),
    ):
        match = [k for k in keys if k != "objective"]
        table1 = [r for r in items if in_table1(r, sides)]
        arms = [r for r in table1 if r["objective"] not in ("mle", UNTRAINED)]
        for a, b in _pair(arms, [r for r in table1 if r["objective"] == "mle"], match):
            add("objective", a, b, f"{a['objective']}, {method_name(a)}", f"mle, {method_name(b)}")
    if null:
        for a, b, a_label, b_label in null_pairs(rows):
            add(NULL, a, b, _label(a_label, a, varying), _label(b_label, b, varying))
    return out


def _arm_name(r: dict) -> str:
    """A condition as the null family names it: its training and (for sampled results) sampling perturbation."""

    def side(name: str) -> str:
        level = r[f"{name}_intensity"]
        return "none" if not level else f"{r[f'{name}_strategy']} {level:g}"

    sampled = f", sampling {side('test')}" if r["kind"] not in MODEL_KINDS else ""
    return f"training {side('train')}{sampled}"


def null_pairs(rows: list[dict]) -> list[tuple[dict, dict, str, str]]:
    """The A/A null (`report.aa_null`, docs/method.md §4, "The A/A null"): every trained condition with 2k >= 2 seeds,
    its first k seeds (sorted) against its last k, the i-th of each half paired, and tested across the k pairs as
    report.seeds tests two methods. Both arms are one method; they differ only by their training seeds
    (initialisation, data order, the perturbed data; two methods' arms share their seed, one method's cannot), and
    share prompts and sampling seeds as every contrast's arms do, so each pair's difference is pure training
    randomness and a seed-level test over the k pairs rejects at its nominal level when its premises hold. An odd seed out is left out. (a, b, a's label, b's label): a the later
    seed; the labels name the condition and each half's seeds, the same for all k pairs, so report.seeds groups
    them."""
    groups: defaultdict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["objective"] != UNTRAINED:  # an untrained model is one model, whatever its seed
            groups[tuple(r[k] for k in ["kind", *KEYS] if k != "seed")].append(r)
    out = []
    for group in groups.values():
        ordered = sorted(group, key=lambda r: r["seed"])
        half = len(ordered) // 2
        earlier, later = ordered[:half], ordered[half : 2 * half]
        name = _arm_name(ordered[0])
        seeds = lambda rs: ", ".join(str(r["seed"]) for r in rs)
        for a, b in zip(later, earlier):
            out.append((a, b, f"{name}{NULL_SEEDS}{seeds(later)}", f"{name}{NULL_SEEDS}{seeds(earlier)}"))
    return out


def null_arm(label: str) -> str:
    """The condition a null arm's label names, without its half's seeds."""
    return label.split(NULL_SEEDS)[0]


def arm_intensity(strategy: str, intensity: float) -> float:
    """The intensity of a strategy's ablation arms: the headline one, or 1 for a strategy that perturbs every
    position (NEFTune)."""
    return 1.0 if get_strategy(strategy).every_position else intensity


def ablation_strategies(rows: list[dict]) -> list[str]:
    """The strategies a study perturbs with, insertion (the paper's) first, then the others by name."""
    found = {r[f"{side}_strategy"] for r in rows for side in ("train", "test")} - {NO_STRATEGY, None}
    return sorted(found, key=lambda s: (s != PAPER_STRATEGY, s))


def pair_identity(pair: dict) -> str:
    """The comparison's identity, which seeds its swaps and resamples (here and in report.joint_mauve's job)."""
    return "|".join(
        str(pair[k])
        for k in ["family", "model", "dataset", "objective", "eval_set", "decoder", "seed", "a", "b", "kind"]
    )


def pair_id(pair: dict) -> str:
    """The file name of a designed MAUVE contrast's result: a hash of its family and its two metrics files, so that
    the workflow (which lists the jobs) and `contrasts` (which reads them back) derive it from the same pair."""
    return hashlib.sha256(f"{pair['family']}|{pair['path_a']}|{pair['path_b']}".encode()).hexdigest()[:16]


def designed_mauve(
    paths: list[str],
    intensity: float,
    resamples: int = RESAMPLES,
    unresolvable: Collection[str] = (),
    null: bool = False,
) -> dict[str, dict]:
    """The MAUVE contrasts the study designs, by report.joint_mauve.pair_id: each pair with its identity and its
    table's B. The workflow lists one job per entry; `contrasts` reads their results back by the same id.
    `unresolvable`: eval sets whose MAUVE can never reach its floor (evaluate.metrics.mauve_never_resolves); their
    pairs get no job, and `contrasts` finds their cells flagged "too few texts" in the metrics files, as a job
    would have. B stays that of the whole table. `null`: the A/A null's pairs too (`report.aa_null`)."""
    sampled = [p for p in pairs(condition_rows(paths), intensity, null) if p["kind"] == "metrics"]
    size = Counter(p["family"] for p in sampled)
    return {
        pair_id(p): {**p, "identity": pair_identity(p), "resamples": resamples_for(size[p["family"]], resamples)}
        for p in sampled
        if p["eval_set"] not in unresolvable
    }
