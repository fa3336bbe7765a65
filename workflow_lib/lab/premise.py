"""Model classes that meet the theorems' premise by construction, with exact or two-sided U_base and U_perturb.

The paper's U_P(delta) (lines 351-379) is a sup over pairs of the class P that agree (TV 0) on every support prefix.
Trained models never agree exactly, so their pairwise TV is no bound on U in either direction. Here each class is a
finite family of next-word laws on the grammar's words: its members share one law on a set A of prefixes and
differ elsewhere by a constant law each (uniform, the support's average law, a point mass on its rarest word).
Pairs of members then agree wherever A holds the prefix, and after perturbation

    TV(P_j^T(.|X), P_k^T(.|X)) = P_T(X~ outside A | X) * TV(Q_j, Q_k),

so every number below is a share of T's draws times a constant. Two classes:
- `unseen`: A = prefixes without an unseen word. Q0 never draws an unseen word, so T never leaves A from the
  support: perturbed pairs agree there too (admissible). The share is exact: 1 - beta^u when the row's u unseen
  words lie where T may replace them, else 1.
- `off-support`: A = the support. Uniform replacement leaves the support from support prefixes, so no pair stays
  admissible; class replacement keeps the class sequence, so the share is exactly 0 or 1 per row (one draw
  decides); otherwise it is estimated from `draws` keyed draws with Clopper-Pearson 95% bounds.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from workflow_lib.lab import perturbation, prefix_sets

MEMBERS = ("uniform", "unigram", "rarest word")
CLASSES = ("unseen", "off-support")
TOLERANCE = 1e-12


def member_laws(support_truth: np.ndarray) -> np.ndarray:
    """[3, W] the members' laws where they differ: uniform, the support's average next-word law, and a point mass
    on that law's rarest word (an adversarial member)."""
    unigram = np.asarray(support_truth, dtype=np.float64).mean(0)
    point = np.zeros_like(unigram)
    point[int(np.argmin(unigram))] = 1.0
    return np.stack([np.full_like(unigram, 1.0 / unigram.size), unigram, point])


def max_pairwise_tv(laws: np.ndarray) -> float:
    first, second = np.triu_indices(len(laws), k=1)
    return float(0.5 * np.abs(laws[first] - laws[second]).sum(-1).max())


def unseen_share(lex: prefix_sets.Lexicon, prefixes: np.ndarray, q0: str, beta: float, last: int) -> np.ndarray:
    """Exact P_T(X~ holds an unseen word | X) per row: every unseen word survives unless T replaces it, which it
    does with probability beta inside the window (uniform Q0: any word; class replacement: content words, which
    every unseen word is) and never before it."""
    prefixes = lex.check(prefixes)
    inside = np.arange(prefixes.shape[1]) >= prefixes.shape[1] - last
    unseen = ~lex.seen[prefixes]
    replaceable = unseen & inside[None, :]
    if q0 == "synonym":
        replaceable &= lex.content_class[lex.word_class[prefixes]]
    kept_for_sure = (unseen & ~replaceable).any(1)
    return np.where(kept_for_sure, 1.0, 1.0 - beta ** replaceable.sum(1))


def off_support_counts(grammar, lex: prefix_sets.Lexicon, prefixes: np.ndarray, bases: np.ndarray, q0: str,
                       beta: float, last: int, seed: int, draws: int) -> tuple[np.ndarray, int, bool]:
    """(k [R], n, exact): in how many of n keyed draws X~ left the support. Class replacement at beta 1 keeps every
    class and replaces only content words by seen ones, and the support is a set of class sequences of seen
    words, so one draw decides exactly; otherwise `draws` draws with the lab's keys (shared with a row's base)."""
    exact = q0 == "synonym" and beta >= 1
    n = 1 if exact else draws
    keys = perturbation.keys_for(seed, bases)
    k = np.zeros(len(prefixes), dtype=np.int64)
    for draw in range(n):
        seen = perturbation.perturb_words(lex, prefixes, q0, beta, last, keys, draw, weights_source=grammar)
        k += prefix_sets.support_distance(grammar, lex, seen) > 0
    return k, n, exact


def clopper_pearson(k: np.ndarray, n: int, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided exact binomial bounds on a share from k successes in n draws."""
    from scipy import stats

    k = np.asarray(k, dtype=np.float64)
    tail = (1 - level) / 2
    low = np.where(k > 0, stats.beta.ppf(tail, k, n - k + 1), 0.0)
    high = np.where(k < n, stats.beta.ppf(1 - tail, k + 1, n - k), 1.0)
    return np.nan_to_num(low), np.nan_to_num(high, nan=1.0)


def verdict(low: float | None, high: float | None, bound: float, cap: float) -> str:
    """How a measured [low, high] stands against a bound. 'violated' when even the low end exceeds it; 'vacuous'
    when the bound is at least `cap`, the largest TV the class can show anywhere; 'holds' when the high end is
    within it; else 'unresolved' (the draws do not decide)."""
    if low is None:
        return "no admissible pair"
    if low > bound + TOLERANCE:
        return "violated"
    if bound + TOLERANCE >= cap:
        return "vacuous"
    return "holds" if high <= bound + TOLERANCE else "unresolved"


def premise_table(grammar, lex: prefix_sets.Lexicon, frame: pl.DataFrame, specs: dict[str, dict], length: int,
                  seed: int, draws: int) -> pl.DataFrame:
    """One row per (class, T, family, delta): U_base and U_perturb of each class on the lab's rows (exact, or
    Clopper-Pearson bounds), T's exact constants and the Proposition's, and each theorem's verdict.

    `frame`: the prefix table (row, family, delta, base, ids, truth) in row order. `specs`: T name -> {q0, beta,
    last}. A uniform T is also run with last = length (the Proposition's setting), and there with beta = 1 - 1/(4 L),
    where the Proposition's alpha is 1/4 and the Contractivity theorem has something to say."""
    ids = np.stack(frame["ids"].to_list()).astype(np.int64)
    families, deltas = frame["family"].to_numpy(), frame["delta"].to_numpy()
    base_row = _base_rows(frame)
    bases = ids[base_row]
    support = deltas == 0
    laws = member_laws(np.array(frame.filter(pl.col("delta") == 0)["truth"].to_list(), dtype=np.float64))
    spread = max_pairwise_tv(laws)
    runs = dict(specs)
    for name, spec in specs.items():
        if spec["q0"] == "uniform" and spec["last"] < length:
            runs[f"{name}, l = L"] = {**spec, "last": length}
        if spec["q0"] == "uniform":  # where the Proposition promises a contraction: (1 - beta) L = 1/4
            beta = 1 - 1 / (4 * length)
            runs[f"{name}, l = L, beta = {beta:.4g}"] = {**spec, "last": length, "beta": beta}
    records = []
    for name, spec in runs.items():
        q0, beta, last = spec["q0"], float(spec["beta"]), int(spec["last"])
        c_rows, _ = perturbation.row_tv_to_base(lex, ids, bases, q0, beta, last)
        shares = {"unseen": (unseen_share(lex, ids, q0, beta, last), True)}
        k, n, exact = off_support_counts(grammar, lex, ids, frame["base"].to_numpy(), q0, beta, last, seed, draws)
        shares["off-support"] = (k / n, exact) if exact else (clopper_pearson(k, n), False)
        differs = {"unseen": (~lex.seen[ids]).any(1), "off-support": ~support}
        for cls in CLASSES:
            share, exact = shares[cls]
            low, high = (share, share) if exact else share
            admissible = bool(high[support].max() <= TOLERANCE) if exact else bool((k[support] == 0).all())
            for family in sorted(set(families)):
                for delta in sorted(set(deltas[families == family])):
                    idx = np.flatnonzero((families == family) & (deltas == delta))
                    alpha, c_exact = perturbation.exact_constants(q0, beta, last, length, int(delta))
                    # The Proposition is about one fixed Q0; class replacement draws from the word's own class.
                    alpha_prop, c_prop = (perturbation.proposition_constants(beta, last, int(delta)) if q0 == "uniform"
                                          else (None, None))
                    sp = idx[c_rows[idx] <= TOLERANCE]
                    rec = {"class": cls, "perturbation": name, "q0": q0, "beta": beta, "last": last,
                           "family": family, "delta": int(delta), "n_prefixes": idx.size, "exact": exact,
                           "draws": 1 if exact else n, "admissible": admissible, "member_tv": spread,
                           "U_base": spread * float(differs[cls][idx].max()),
                           "U_perturb_low": spread * float(low[idx].max()) if admissible else None,
                           "U_perturb_high": spread * float(high[idx].max()) if admissible else None,
                           "alpha": alpha, "alpha_proposition": alpha_prop, "C": c_exact, "C_proposition": c_prop,
                           "C_rows": float(c_rows[idx].max()), "sp_rows": sp.size,
                           "U_perturb_sp_high": spread * float(high[sp].max()) if admissible and sp.size else None}
                    rec["robustness"] = verdict(rec["U_perturb_low"], rec["U_perturb_high"], 2 * c_exact, spread)
                    rec["robustness_proposition"] = ("not applicable (not the Proposition's T)" if c_prop is None else
                                                     verdict(rec["U_perturb_low"], rec["U_perturb_high"], 2 * c_prop,
                                                             spread))
                    rec["extrapolability"] = ("—" if delta == 0 else "not applicable (no row with T(.|X') = T(.|X0))"
                                              if not sp.size else
                                              verdict(spread * float(low[sp].max()) if admissible else None,
                                                      rec["U_perturb_sp_high"], 0.0, np.inf))
                    records.append(rec)
    table = pl.DataFrame(records, orient="row", infer_schema_length=None)
    return _with_contraction(table, runs, length)


def global_uncertainty(cls: str, q0: str, beta: float, last: int, length: int) -> float:
    """U_perturb^inf / U_base^inf of a class, exactly, over every prefix of `length` words (not only the lab's rows):
    the largest share of T's draws that leaves the set A where the members agree.

    `unseen`: an unseen word before the window is never replaced (share 1); with l = L the worst prefix is all
    unseen words, kept unless all L are replaced (1 - beta^L), or with class replacement (which replaces every
    content word, and every unseen word is one) 1 - beta^L too. `off-support`: a held-out class sequence is never
    restored by class replacement (1); under uniform replacement no pair is admissible (None)."""
    if cls == "unseen":
        return 1.0 - beta ** length if last >= length else 1.0
    return None if q0 == "uniform" else 1.0


def _with_contraction(table: pl.DataFrame, runs: dict[str, dict], length: int) -> pl.DataFrame:
    """The Contractivity theorem compares GLOBAL uncertainties, sups over every prefix: U_perturb^inf <= 2 alpha
    U_base^inf (paper lines 441-449, under Assumption UI, which these classes meet: their base pairs agree on the
    support). Both sides are exact here (`global_uncertainty`; U_base^inf is the members' largest TV), one verdict
    per (class, T); the rows' largest U_perturb must not exceed U_perturb^inf (asserted)."""
    records = []
    for (cls, name), part in table.group_by(["class", "perturbation"], maintain_order=True):
        spec = runs[name]
        share = global_uncertainty(cls, spec["q0"], float(spec["beta"]), int(spec["last"]), length)
        spread, alpha = part["member_tv"][0], part["alpha"].max()
        u_inf = None if share is None or not part["admissible"].all() else spread * share
        if u_inf is not None and part["U_perturb_low"].max() > u_inf + TOLERANCE:
            raise ValueError(f"premise class {cls}, T = {name}: a row's U_perturb exceeds the exact global one")
        records.append({"class": cls, "perturbation": name, "U_base_inf": spread, "U_perturb_inf": u_inf,
                        "contraction": verdict(u_inf, u_inf, 2 * alpha * spread, spread)})
    glob = pl.DataFrame(records, schema={"class": pl.Utf8, "perturbation": pl.Utf8, "U_base_inf": pl.Float64,
                                         "U_perturb_inf": pl.Float64, "contraction": pl.Utf8})
    return table.join(glob, on=["class", "perturbation"], how="left", maintain_order="left")


def _base_rows(frame: pl.DataFrame) -> np.ndarray:
    """Per row, the row of its support prefix (same family and base, delta 0)."""
    support = frame.filter(pl.col("delta") == 0).select("family", "base", pl.col("row").alias("base_row"))
    return frame.join(support, on=["family", "base"], how="left", maintain_order="left")["base_row"].to_numpy()
