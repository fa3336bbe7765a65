"""Perturbed sampling (Algorithm 2): continue every prompt `runs` times with exactly `new_tokens` tokens.

`generate` runs the registered mode (sample/modes.py) per batch: `exact` (a fresh perturbation of the whole prefix at every step, reusing the
unperturbed prefix's key/value cache: sample/reuse.py), `cached` (one persistent perturbation per sequence, an
estimator of its own: loops.Cached) or, at intensity 0 where the cache fits, plain ancestral sampling
(loops.Ancestral). Every mode is a `steps.Steps`, and one loop, `steps.sample`, draws every mode's tokens alike,
from uniforms keyed by (seed, run, prompt_id, step) (perturb.backends.KeyedRandom): neither batch size nor
resumption changes a sample. The modes, their laws and their measured tolerances: docs/usage.md, "Sampling and
evaluation"; docs/method.md §1, "Sampling".
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging

import numpy as np
import torch

from workflow_lib.cli import parse_json_arg, run
from workflow_lib.perturb.realised import REALISED_KEY, Tally, check_realised, table_settings
from workflow_lib.perturb.strategies import get as get_strategy
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.sample.decoding import row_keys
from workflow_lib.sample.gather import samples_schema
from workflow_lib.sample.loops import Ancestral, cache_fits
from workflow_lib.sample.modes import DEFAULT, MODES
from workflow_lib.sample.shards import shard_metadata, shard_rows
from workflow_lib.sample.steps import Batch, Mode, sample

log = logging.getLogger("workflow_lib.sample.sampler")


def _resolve(target: str) -> Mode:
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


# The modes (sample/modes.py), of which `generate` picks one per batch (`Ancestral` at intensity 0 where its cache
# fits): each makes the `steps.Steps` of a batch, which `steps.sample` runs; and their makers for a strategy of the
# embedding space (sample/embedded.py).
SAMPLERS: dict[str, Mode] = {m.name: _resolve(m.steps) for m in MODES.values()}
EMBEDDING_SAMPLERS: dict[str, Mode] = {m.name: _resolve(m.embedded_steps) for m in MODES.values()}


def generate(
    model,
    tokenizer,
    prompts: list[str],
    prompt_ids: np.ndarray,
    runs: int,
    new_tokens: int,
    perturbation: dict,
    table: SynonymTable | None,
    seed: int,
    mode: str = DEFAULT,
    batch_size: int = 64,
    decoder: dict | None = None,
    progress: bool = False,
    row_range: tuple[int, int] | None = None,
    tally: Tally | None = None,
) -> dict[str, np.ndarray]:
    """Continuations for every (prompt, run), run-major: arrays prompt_id, run, continuation_ids [n, new_tokens].
    `row_range` [start, stop) continues only those rows of that order (a shard: `shards.shard_rows`, whole
    batches, so each batch is the unsharded job's). `tally`: counts the positions the perturbation selected (and
    could have) over every step's perturbation (perturb/realised.py)."""
    from tqdm import tqdm

    device = next(model.parameters()).device
    special = sorted(set(tokenizer.all_special_ids))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    suppress = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    in_embeddings = get_strategy(perturbation["strategy"]).in_embeddings
    if perturbation["intensity"] > 0 and table is None and not in_embeddings:
        raise ValueError("a perturbed sampler needs a synonym table")
    if perturbation["intensity"] > 0 and in_embeddings and "embedding" not in perturbation:
        raise ValueError(
            f"strategy {perturbation['strategy']}: its noise settings (embedding_perturbation) are missing"
        )
    table = table.to(device) if table is not None else None
    encoded = [np.asarray(ids, dtype=np.int64) for ids in tokenizer(list(prompts))["input_ids"]]
    rows = [(p, r) for r in range(runs) for p in range(len(prompts))]
    first, last = row_range or (0, len(rows))
    if first % batch_size:
        raise ValueError(f"rows from {first}: a shard starts at a batch boundary (a multiple of {batch_size})")
    rows = rows[:last]
    out_prompt = [np.zeros(0, dtype=np.int64)]
    out_run = [np.zeros(0, dtype=np.int64)]
    out_ids = [np.zeros((0, new_tokens), dtype=np.int64)]
    for start in tqdm(range(first, len(rows), batch_size), desc="sample", disable=not progress, mininterval=5):
        chunk = rows[start : start + batch_size]
        lengths = np.array([len(encoded[p]) for p, _ in chunk])
        offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(lengths)]), device=device)
        values = torch.as_tensor(np.concatenate([encoded[p] for p, _ in chunk]), device=device)
        pids = torch.as_tensor([int(prompt_ids[p]) for p, _ in chunk], device=device)
        run_ids = torch.as_tensor([r for _, r in chunk], device=device)
        steps = (EMBEDDING_SAMPLERS if in_embeddings else SAMPLERS)[mode]
        if perturbation["intensity"] == 0 and cache_fits(model, int(lengths.max()), new_tokens):
            steps = Ancestral  # both modes' law at intensity 0, with a cache
        keys = row_keys(seed, pids, run_ids)
        batch = Batch(
            values, offsets, keys, new_tokens, perturbation, table, special, pad_id, suppress, decoder or {}, tally
        )
        generated = sample(model, batch, steps)
        out_prompt.append(pids.cpu().numpy())
        out_run.append(run_ids.cpu().numpy())
        out_ids.append(generated.cpu().numpy())
    return {
        "prompt_id": np.concatenate(out_prompt),
        "run": np.concatenate(out_run),
        "continuation_ids": np.concatenate(out_ids),
    }


PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def load_model(path: str, device: str, precision: str = "fp32", revision: str | None = None):
    """A trained model for sampling, refused if any weight is not finite (a diverged training must not be scored).

    `fp32` (the default) computes every next-token law in float32: the protocol's unbiased ancestral sampling.
    `bf16` runs the model in bfloat16, whose law differs (docs/usage.md, "Precision"; slower on the H200 measured). GPT-2's activation runs
    in place, the same floats twice as fast (`models.use_in_place_activations`)."""
    from transformers import AutoModelForCausalLM

    from workflow_lib.cli import StageError
    from workflow_lib.hub import hub_unreachable
    from workflow_lib.models import use_in_place_activations

    if why := hub_unreachable(path):  # an untrained model is named by its hub id
        raise StageError(f"{path}: {why}; point models.<key>.name at a local copy of the checkpoint")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, revision=revision)
    except OSError as error:  # not a folder with a checkpoint, not in the offline cache, not on the hub
        raise StageError(f"{path}: cannot load a causal LM checkpoint ({str(error).splitlines()[0]})") from error
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise StageError(
            f"{path}: {len(bad)} weight tensors are not finite (first: {bad[0]}); the model diverged in "
            "training, so nothing is sampled or scored from it. Retrain it (see its train_log.csv)"
        )
    # transformers defines PreTrainedModel.to under @wraps(torch.nn.Module.to), which mypy reads as wanting `self`
    model = model.to(device=device, dtype=PRECISIONS[precision])  # type: ignore[call-arg]  # @wraps(Module.to) typing
    return use_in_place_activations(model.eval())


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.sample.sampler")
    parser.add_argument("--model", required=True, help="model folder (with its tokenizer) or hub id")
    parser.add_argument("--revision", help="hub revision of an untrained hub model")
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--synonyms", help="synonym table Parquet (perturbed sampling)")
    parser.add_argument("--perturbation", required=True, help="JSON: strategy, intensity")
    parser.add_argument("--settings", required=True, help="JSON: the sampling section and the seed")
    parser.add_argument(
        "--decoder", default="{}", help="JSON: temperature, top_k, top_p, typical_p (default: unbiased)"
    )
    parser.add_argument(
        "--shard", default="0/1", help="INDEX/COUNT: continue only this shard's rows (sample/shards.py; default: all)"
    )
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    import pyarrow as pa
    from transformers import AutoTokenizer

    from workflow_lib.files import read_parquet, write_parquet

    settings = parse_json_arg(args.settings, "sampling")
    perturbation = parse_json_arg(args.perturbation, "test perturbation")
    decoder = parse_json_arg(args.decoder, "decoder")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(args.model, revision=args.revision)
    model = load_model(args.model, device, settings["precision"], args.revision)
    prompts = read_parquet(args.prompts)
    stored = read_parquet(args.synonyms) if args.synonyms else None
    table = SynonymTable.from_arrow(stored) if stored is not None else None
    tally = Tally()
    index, count = (int(n) for n in args.shard.split("/"))
    rows = shard_rows(prompts.num_rows * settings["runs"], settings["batch_size"], index, count)
    out = generate(
        model,
        tokenizer,
        prompts.column("prefix").to_pylist(),
        prompts.column("prompt_id").to_numpy(),
        settings["runs"],
        settings["new_tokens"],
        perturbation,
        table,
        settings["seed"],
        settings["mode"],
        settings["batch_size"],
        decoder,
        progress=True,
        row_range=rows,
        tally=tally,
    )
    realised = tally.realised(float(perturbation["intensity"]))
    condition = f"samples {args.output} ({perturbation['strategy']} at {perturbation['intensity']:g})"
    check_realised(
        realised, condition, table_settings(stored.schema.metadata) if stored is not None else None, args.synonyms
    )
    metadata = {**shard_metadata(index, count, rows), REALISED_KEY: json.dumps(realised.as_dict(), sort_keys=True)}
    ids = out["continuation_ids"]
    texts = tokenizer.batch_decode(ids.tolist(), skip_special_tokens=True) if len(ids) else []  # [] decodes to [""]
    width = ids.shape[1]
    write_parquet(
        pa.table(
            {
                "prompt_id": pa.array(out["prompt_id"].astype(np.int64)),
                "run": pa.array(out["run"].astype(np.int32)),
                "continuation_ids": pa.ListArray.from_arrays(
                    pa.array(np.arange(0, ids.size + 1, width, dtype=np.int32)),
                    pa.array(ids.reshape(-1).astype(np.int32)),
                ),
                "text": pa.array(texts, type=pa.string()),
            },
            schema=samples_schema(metadata),
        ),
        args.output,
    )
    log.info(
        "shard %d of %d: rows %d-%d, %d continuations of %d tokens (%s mode, %s, decoder %s; realised %s)",
        index,
        count,
        *rows,
        len(ids),
        width,
        settings["mode"],
        perturbation,
        decoder or "unbiased",
        realised.as_dict(),
    )


if __name__ == "__main__":
    run(main)
