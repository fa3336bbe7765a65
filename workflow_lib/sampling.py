"""Perturbed sampling (Algorithm 2): continue every prompt with a fresh perturbation of its prefix.

Two modes:
- `exact`: Algorithm 2 as written. At EVERY step the whole prefix (prompt + tokens generated so far) is
  perturbed afresh with the shared perturber on the model's device, the ragged perturbed prefixes are left-
  padded into one batch (attention mask, position ids), and X_t is drawn from P(. | X~). A fresh
  perturbation can change any position, so at intensity > 0 each step recomputes the batch without a
  key/value cache.
- `cached`: each new token is perturbed once, when it is appended, and one perturbed prefix is kept with its
  key/value cache: replacement feeds the synonym instead of the token, deletion feeds nothing, insertion
  feeds the token and then its synonym. Every step's prefix has the marginal law of `exact` for
  replacement and deletion (each token is perturbed independently with probability alpha); for insertion
  the synonym sits right after its source instead of at a uniform gap, and in all strategies the
  perturbations are correlated across steps (the same draws persist). The results say whether it matters.
  A deleted token or an unused insertion slot stays in the cache as a masked slot: harmless under global
  attention, but a local or sliding-window layer (GPT-Neo, Mistral) counts slots, so such models are refused
  for cached insertion and deletion once the cache outgrows their window.

At intensity 0 nothing is perturbed and both modes are plain ancestral sampling, which `sample_ancestral` runs
with a key/value cache and the same uniforms, suppressed tokens and decoder as `sample_exact`. A cache rounds
differently from the full forward, so a draw whose uniform lies within that rounding of a CDF bound is redrawn
from logits recomputed as `sample_exact` computes them: the tokens are `sample_exact`'s. Intensity 0 goes through
`sample_exact` (which keeps the last tokens of a long prefix) or `sample_cached` (which refuses) where a batch's
longest prompt plus the new tokens outgrows the model's context, and for top-p and typical decoders.

Randomness is counter-based (perturb.KeyedRandom): every draw depends on (seed, run, prompt_id, step) only,
so neither batch size nor resumption changes a sample. The end-of-text token is suppressed so that every
continuation has exactly `new_tokens` tokens (min = max new tokens).
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import torch

from workflow_lib.cli import parse_json_arg, run
from workflow_lib.perturb import KeyedRandom, SynonymTable, hash_uniform, perturb, splitmix64

log = logging.getLogger("workflow_lib.sampling")
DRAW_PURPOSE = 7  # keeps the token draw's stream apart from the perturbation's (purposes 0-3)


def row_keys(seed: int, prompt_ids: torch.Tensor, runs: torch.Tensor) -> torch.Tensor:
    """One int64 key per (prompt, run): the root of all of that continuation's randomness."""
    return splitmix64(splitmix64(torch.full_like(prompt_ids, seed)) + prompt_ids * 1_000_003 + runs)


def step_keys(keys: torch.Tensor, step: int) -> torch.Tensor:
    return splitmix64(keys + step * 7_919)


DECODER_DEFAULTS = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "typical_p": 1.0}  # `unbiased`: the law itself


def warpers(decoder: dict):
    """transformers' logits warpers for a decoder, in generate()'s order (temperature, top-k, top-p, typical).
    A setting at its neutral value (temperature 1, top_k 0, top_p 1, typical_p 1) adds no warper, as in
    generate(), so such a decoder draws exactly what `unbiased` draws."""
    from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper, TypicalLogitsWarper)

    d = {**DECODER_DEFAULTS, **decoder}
    out = LogitsProcessorList()
    if d["temperature"] != 1.0:
        out.append(TemperatureLogitsWarper(d["temperature"]))
    if d["top_k"]:
        out.append(TopKLogitsWarper(d["top_k"]))
    if d["top_p"] < 1.0:
        out.append(TopPLogitsWarper(d["top_p"]))
    if d["typical_p"] < 1.0:
        out.append(TypicalLogitsWarper(d["typical_p"]))
    return out


def decoded_probs(logits: torch.Tensor, decoder: dict | None = None) -> torch.Tensor:
    """The law a decoder draws from: the model's next-token logits [B, V], warped, as float64 probabilities."""
    logits = logits.float()
    chain = warpers(decoder or {})
    if chain:
        logits = chain(None, logits)  # warpers ignore input_ids
    return torch.softmax(logits, dim=-1, dtype=torch.float64)


def draw(logits: torch.Tensor, u: torch.Tensor, decoder: dict | None = None) -> torch.Tensor:
    """Inverse-CDF sampling with the given uniforms [B]: the uniforms are keyed by (prompt, run, step), so two
    decoders of the same (prompt, run) share them (and every perturbation draw), differing only by the law."""
    probs = decoded_probs(logits, decoder)
    cdf = probs.cumsum(-1)
    u = (u * cdf[:, -1]).unsqueeze(1)
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[-1] - 1)


def left_pad(values: torch.Tensor, offsets: torch.Tensor, pad_id: int, max_len: int | None = None) -> tuple[torch.Tensor, ...]:
    """Ragged rows -> left-padded ids, attention mask and position ids [B, L]. Rows longer than the model's
    context (`max_len`) keep their last max_len tokens."""
    lengths = offsets[1:] - offsets[:-1]
    width = int(lengths.max()) if max_len is None else min(int(lengths.max()), max_len)
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=values.device), lengths)
    col = torch.arange(len(values), device=values.device) - offsets[seq] + (width - lengths[seq])
    keep = col >= 0
    ids = torch.full((len(lengths), width), pad_id, dtype=torch.long, device=values.device)
    mask = torch.zeros_like(ids)
    ids[seq[keep], col[keep]] = values[keep].long()
    mask[seq[keep], col[keep]] = 1
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


def context_length(model) -> int | None:
    config = getattr(model, "config", None)
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


def attention_window(model) -> int | None:
    """The slots a windowed layer attends to (GPT-Neo's local layers, sliding-window models), else None. The
    window counts cache slots, masked ones included, not tokens."""
    config = getattr(model, "config", None)
    kinds = [*(getattr(config, "attention_layers", None) or ()), *(getattr(config, "layer_types", None) or ())]
    if any(kind in ("local", "sliding_attention") for kind in kinds):
        return getattr(config, "window_size", None) or getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True):
        return getattr(config, "sliding_window", None)
    return None


def with_generated(prompt_values, prompt_offsets, generated: torch.Tensor):
    """Ragged rows prompt_b + generated[b] (all rows have generated.shape[1] new tokens)."""
    steps = generated.shape[1]
    n_rows = len(prompt_offsets) - 1
    offsets = prompt_offsets + steps * torch.arange(n_rows + 1, device=generated.device)
    values = torch.empty(int(offsets[-1]), dtype=torch.long, device=generated.device)
    lengths = prompt_offsets[1:] - prompt_offsets[:-1]
    seq = torch.repeat_interleave(torch.arange(n_rows, device=generated.device), lengths)
    values[torch.arange(len(prompt_values), device=generated.device) + steps * seq] = prompt_values.long()
    if steps:
        starts = offsets[:-1] + lengths
        values[(starts[:, None] + torch.arange(steps, device=generated.device)).reshape(-1)] = generated.reshape(-1)
    return values, offsets


def prefix_logits(model, prompt_values, prompt_offsets, generated: torch.Tensor, k: torch.Tensor, perturbation: dict,
                  table, special, pad_id: int) -> torch.Tensor:
    """One step of Algorithm 2 without a cache: the next-token logits [B, V] of every prompt + generated row,
    freshly perturbed with the step's keys `k`, the whole batch left-padded (a prefix longer than the context
    keeps its last tokens) and recomputed."""
    values, offsets = with_generated(prompt_values, prompt_offsets, generated)
    if perturbation["intensity"] > 0:
        out = perturb(values, offsets, perturbation["strategy"], perturbation["intensity"], table,
                      KeyedRandom(k, offsets), special)
        values, offsets = out.values, out.offsets
    ids, mask, positions = left_pad(values, offsets, pad_id, context_length(model))
    return model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False, logits_to_keep=1).logits[:, -1]


@torch.no_grad()
def sample_exact(model, prompt_values, prompt_offsets, keys, new_tokens: int, perturbation: dict, table, special,
                 pad_id: int, suppress: list[int], **draw_kw) -> torch.Tensor:
    """Algorithm 2: a fresh perturbation of the whole prefix at every step."""
    n_rows = len(prompt_offsets) - 1
    generated = torch.empty((n_rows, 0), dtype=torch.long, device=prompt_values.device)
    finite = torch.ones((), dtype=torch.bool, device=prompt_values.device)
    for step in range(new_tokens):
        k = step_keys(keys, step)
        logits = prefix_logits(model, prompt_values, prompt_offsets, generated, k, perturbation, table, special, pad_id)
        finite &= valid_logits(logits)
        logits[:, suppress] = float("-inf")
        token = draw(logits, hash_uniform(k * 31 + DRAW_PURPOSE), **draw_kw)
        generated = torch.cat([generated, token[:, None]], dim=1)
    check_finite_logits(finite, "sampling (exact)")
    return generated


# A key/value cache computes the same logits as sample_exact's full forward in another floating-point order:
# they differ by ~1e-6 and the normalised CDF a uniform is compared with by up to 8e-7 (measured on the default
# study's trained models, 288,000 draws). A draw is trusted to the cache only when its uniform lies further than
# CDF_TOLERANCE from the CDF bounds of its token (and a top-k cut is further than LOGIT_TOLERANCE from a tie);
# otherwise that step is recomputed as sample_exact computes it. At every recomputation the cached law is
# compared with the exact one, and a difference above half a tolerance sends the whole batch to sample_exact.
CDF_TOLERANCE = 4e-6
LOGIT_TOLERANCE = 4e-5


def draw_margin(logits: torch.Tensor, u: torch.Tensor, decoder: dict) -> torch.Tensor:
    """Per row: how far `draw`'s uniform lies from the CDF bounds of the token it selects (probability, normalised),
    or -1 where the decoder's top-k cut is within LOGIT_TOLERANCE of a tie. A row whose margin exceeds the
    rounding of its law selects the same token from the exactly computed logits."""
    probs = decoded_probs(logits, decoder)
    cdf = probs.cumsum(-1)
    target = u * cdf[:, -1]
    token = torch.searchsorted(cdf, target[:, None], right=True).clamp(max=probs.shape[-1] - 1)
    upper = cdf.gather(1, token)[:, 0]
    lower = torch.where(token[:, 0] > 0, cdf.gather(1, (token - 1).clamp(min=0))[:, 0], 0.0)
    margin = torch.minimum(target - lower, upper - target) / cdf[:, -1]
    top_k = {**DECODER_DEFAULTS, **decoder}["top_k"]
    if top_k and top_k < logits.shape[-1]:  # the temperature divides scores without reordering them
        cut = torch.topk(logits.float(), top_k + 1, dim=-1).values
        margin = torch.where(cut[:, -2] - cut[:, -1] > LOGIT_TOLERANCE, margin, -1.0)
    return margin


def within_rounding(cached: torch.Tensor, exact: torch.Tensor, decoder: dict) -> bool:
    """Whether the cached logits' law (and, for a top-k decoder, their scores) lie within half the tolerances of
    the exact ones."""
    law_gap = (decoded_probs(cached, decoder).cumsum(-1) - decoded_probs(exact, decoder).cumsum(-1)).abs().max()
    if not {**DECODER_DEFAULTS, **decoder}["top_k"]:
        return bool(law_gap <= CDF_TOLERANCE / 2)
    finite = torch.isfinite(exact)
    logit_gap = (cached - exact)[finite].abs().max() if finite.any() else torch.zeros(())
    return bool(law_gap <= CDF_TOLERANCE / 2) and bool(logit_gap <= LOGIT_TOLERANCE / 2)


def cache_keeps_draws(decoder: dict) -> bool:
    """Decoders whose draws `sample_ancestral` certifies: temperature and top-k. Top-p and typical sets are cut
    on cumulative sums of sorted probabilities, which its margins do not cover; those decoders recompute."""
    d = {**DECODER_DEFAULTS, **decoder}
    return d["top_p"] >= 1.0 and d["typical_p"] >= 1.0


@torch.no_grad()
def sample_ancestral(model, prompt_values, prompt_offsets, keys, new_tokens: int, perturbation: dict, table, special,
                     pad_id: int, suppress: list[int], decoder: dict | None = None) -> torch.Tensor:
    """Intensity 0 (Algorithm 2 with nothing perturbed): plain ancestral sampling with a key/value cache, drawing
    the tokens `sample_exact` draws.

    The batch is laid out as `sample_exact` lays it out (left padding, position ids counting real tokens) and each
    step draws with the same uniforms, suppressed tokens and decoder from the cached logits, except where a draw
    lies within the rounding of a CDF bound (see CDF_TOLERANCE): that step's logits are recomputed without the
    cache, as `sample_exact` computes them. The last token is drawn, never fed: the cache holds at most
    prompt + new_tokens - 1 positions (`cache_fits`). Arguments as `sample_exact`; `perturbation`, `table` and
    `special` are unused (intensity 0)."""
    decoder = decoder or {}
    ids, mask, positions = left_pad(prompt_values, prompt_offsets, pad_id)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    past, logits = out.past_key_values, out.logits[:, -1]
    finite = valid_logits(logits)
    fed = torch.ones((len(keys), 1), dtype=mask.dtype, device=mask.device)
    generated = torch.empty((len(keys), 0), dtype=torch.long, device=keys.device)
    recomputed = 0
    for step in range(new_tokens):
        k = step_keys(keys, step)
        u = hash_uniform(k * 31 + DRAW_PURPOSE)
        logits[:, suppress] = float("-inf")
        if (draw_margin(logits, u, decoder) <= CDF_TOLERANCE).any():
            exact = prefix_logits(model, prompt_values, prompt_offsets, generated, k, perturbation, table, special, pad_id)
            finite &= valid_logits(exact)
            exact[:, suppress] = float("-inf")
            if not within_rounding(logits, exact, decoder):
                log.warning("intensity 0: the cached logits differ from the uncached ones by more than the rounding "
                            "sample_ancestral allows for; this batch is sampled without a cache")
                return sample_exact(model, prompt_values, prompt_offsets, keys, new_tokens, perturbation, table,
                                    special, pad_id, suppress, decoder=decoder)
            logits, recomputed = exact, recomputed + 1
        token = draw(logits, u, decoder=decoder)
        generated = torch.cat([generated, token[:, None]], dim=1)
        if step == new_tokens - 1:
            break
        position = mask.sum(1, keepdim=True)  # the real tokens before this one, as left_pad counts them
        mask = torch.cat([mask, fed], dim=1)
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=position, past_key_values=past,
                    use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1]
        finite &= valid_logits(logits)
    check_finite_logits(finite, "sampling (intensity 0)")
    log.debug("intensity 0: %d of %d steps recomputed without the cache", recomputed, new_tokens)
    return generated


def cache_fits(model, longest_prompt: int, new_tokens: int) -> bool:
    """Whether `sample_ancestral` can keep a batch whose longest prompt has `longest_prompt` tokens in its cache
    (prompt + new_tokens - 1 positions). Where it cannot, `sample_exact` keeps the last tokens of the prefix."""
    context = context_length(model)
    return context is None or longest_prompt + new_tokens - 1 <= context


@torch.no_grad()
def sample_cached(model, prompt_values, prompt_offsets, keys, new_tokens: int, perturbation: dict, table, special,
                  pad_id: int, suppress: list[int], **draw_kw) -> torch.Tensor:
    """One persistent perturbed prefix with its key/value cache; each new token is perturbed on arrival."""
    device, alpha, strategy = prompt_values.device, perturbation["intensity"], perturbation["strategy"]
    values, offsets = prompt_values, prompt_offsets
    if alpha > 0:  # the prompt itself, perturbed once
        out = perturb(values, offsets, strategy, alpha, table, KeyedRandom(keys, offsets), special)
        values, offsets = out.values, out.offsets
    longest = int((offsets[1:] - offsets[:-1]).max()) + new_tokens * (2 if strategy == "insertion" else 1)
    if context_length(model) and longest > context_length(model):
        raise ValueError(f"cached sampling needs {longest} positions but the model has {context_length(model)}: "
                         "shorten sampling.new_tokens or the prompts, or use mode exact (it keeps the last tokens)")
    window = attention_window(model)
    if alpha > 0 and strategy != "replacement" and window and longest > window:
        # A deleted token or an unused insertion slot is a masked slot in the cache; a windowed layer counts it,
        # so the model would see fewer tokens of the perturbed prefix than it should.
        raise ValueError(f"cached sampling with {strategy} leaves masked slots in the key/value cache, and this model "
                         f"attends to windows of {window} slots (local or sliding-window attention), so its context "
                         "would shrink: use mode exact for this model")
    ids, mask, positions = left_pad(values, offsets, pad_id)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1]
    rows = torch.arange(len(keys), device=device)
    has_syn = table.has_synonyms(_torch_ops(device)) if alpha > 0 and strategy != "deletion" else None
    special_t = torch.as_tensor(special, device=device)
    generated = []
    finite = valid_logits(logits)
    for step in range(new_tokens):
        k = step_keys(keys, step)
        logits[:, suppress] = float("-inf")
        token = draw(logits, hash_uniform(k * 31 + DRAW_PURPOSE), **draw_kw)
        generated.append(token)
        eligible = ~torch.isin(token, special_t)
        if has_syn is not None:
            eligible &= has_syn[token]
        selected = eligible & (hash_uniform(k * 31 + 1) < alpha) if alpha > 0 else torch.zeros_like(eligible)
        if alpha > 0 and strategy != "deletion" and selected.any():
            u = hash_uniform(k * 31 + 2)
            synonym = table.sample(token.clamp(min=0), u, _torch_ops(device))
        else:
            synonym = token
        if strategy == "insertion" and alpha > 0:
            chunk = torch.stack([token, torch.where(selected, synonym, pad_id)], dim=1)
            chunk_mask = torch.stack([torch.ones_like(selected), selected], dim=1).long()
        elif strategy == "replacement":
            chunk, chunk_mask = torch.where(selected, synonym, token)[:, None], torch.ones_like(token)[:, None]
        else:  # deletion (or intensity 0): a deleted token is not fed at all
            chunk, chunk_mask = torch.where(selected, pad_id, token)[:, None], (~selected).long()[:, None]
        mask = torch.cat([mask, chunk_mask], dim=1)
        positions = (mask.cumsum(1) - 1).clamp(min=0)[:, -chunk.shape[1]:]
        out = model(input_ids=chunk, attention_mask=mask, position_ids=positions, past_key_values=past, use_cache=True)
        past = out.past_key_values
        last_real = chunk_mask.sum(1) - 1  # -1: nothing fed, the view (and its next-token law) is unchanged
        fed = last_real >= 0
        finite &= valid_logits(out.logits)
        logits = torch.where(fed[:, None], out.logits[rows, last_real.clamp(min=0)], logits)
    check_finite_logits(finite, "sampling (cached)")
    return torch.stack(generated, dim=1)


def _torch_ops(device):
    from workflow_lib.perturb import _Torch

    return _Torch(None, device)


SAMPLERS = {"exact": sample_exact, "cached": sample_cached}


def generate(model, tokenizer, prompts: list[str], prompt_ids: np.ndarray, runs: int, new_tokens: int, perturbation: dict,
             table: SynonymTable | None, seed: int, mode: str = "exact", batch_size: int = 64, decoder: dict | None = None,
             progress: bool = False) -> dict[str, np.ndarray]:
    """Continuations for every (prompt, run): arrays prompt_id, run, continuation_ids [n, new_tokens]."""
    from tqdm import tqdm

    device = next(model.parameters()).device
    special = sorted(set(tokenizer.all_special_ids))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    suppress = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    if perturbation["intensity"] > 0 and table is None:
        raise ValueError("a perturbed sampler needs a synonym table")
    table = table.to(device) if table is not None else None
    encoded = [np.asarray(ids, dtype=np.int64) for ids in tokenizer(list(prompts))["input_ids"]]
    rows = [(p, r) for r in range(runs) for p in range(len(prompts))]
    out_prompt, out_run, out_ids = [], [], []
    for start in tqdm(range(0, len(rows), batch_size), desc="sample", disable=not progress, mininterval=5):
        chunk = rows[start : start + batch_size]
        lengths = np.array([len(encoded[p]) for p, _ in chunk])
        offsets = torch.as_tensor(np.concatenate([[0], np.cumsum(lengths)]), device=device)
        values = torch.as_tensor(np.concatenate([encoded[p] for p, _ in chunk]), device=device)
        pids = torch.as_tensor([int(prompt_ids[p]) for p, _ in chunk], device=device)
        run_ids = torch.as_tensor([r for _, r in chunk], device=device)
        sampler = SAMPLERS[mode]
        if perturbation["intensity"] == 0 and cache_keeps_draws(decoder or {}) and cache_fits(model, int(lengths.max()), new_tokens):
            sampler = sample_ancestral  # both modes' law at intensity 0, the same tokens, with a cache
        generated = sampler(model, values, offsets, row_keys(seed, pids, run_ids), new_tokens, perturbation, table,
                            special, pad_id, suppress, decoder=decoder or {})
        out_prompt.append(pids.cpu().numpy())
        out_run.append(run_ids.cpu().numpy())
        out_ids.append(generated.cpu().numpy())
    return {"prompt_id": np.concatenate(out_prompt), "run": np.concatenate(out_run), "continuation_ids": np.concatenate(out_ids)}


PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def load_model(path: str, device: str, precision: str = "fp32", revision: str | None = None):
    """A trained model for sampling, refused if any weight is not finite (a diverged training must not be scored).

    `fp32` (the default) computes every next-token law in float32: the protocol's unbiased ancestral sampling.
    `bf16` runs the model in bfloat16, a speed mode whose law differs (README, "Precision"). GPT-2's activation runs
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
        raise StageError(f"{path}: {len(bad)} weight tensors are not finite (first: {bad[0]}); the model diverged in "
                         "training, so nothing is sampled or scored from it. Retrain it (see its train_log.csv)")
    return use_in_place_activations(model.to(device=device, dtype=PRECISIONS[precision]).eval())


def valid_logits(logits: torch.Tensor) -> torch.Tensor:
    """True when every row is a law: no NaN, no +inf, and some token not at -inf (a -inf logit alone is a
    probability of 0, which a model may state)."""
    return ~(torch.isnan(logits) | (logits == float("inf"))).any() & (logits > float("-inf")).any(-1).all()


def check_finite_logits(finite: torch.Tensor, what: str) -> None:
    """One check per batch (not per step, which would synchronise a GPU every token): a model that produced a
    non-finite logit is refused, so no sample (and no metric) comes from it."""
    from workflow_lib.cli import StageError

    if not bool(finite):
        raise StageError(f"{what}: the model produced non-finite logits; nothing is written for it. Check its weights "
                         "and its train_log.csv (a diverged training), or sampling.precision")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.sampling")
    parser.add_argument("--model", required=True, help="model folder (with its tokenizer) or hub id")
    parser.add_argument("--revision", help="hub revision of an untrained hub model")
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--synonyms", help="synonym table Parquet (perturbed sampling)")
    parser.add_argument("--perturbation", required=True, help="JSON: strategy, intensity")
    parser.add_argument("--settings", required=True, help="JSON: the sampling section and the seed")
    parser.add_argument("--decoder", default="{}", help="JSON: temperature, top_k, top_p, typical_p (default: unbiased)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from workflow_lib.files import write_parquet

    settings = parse_json_arg(args.settings, "sampling")
    perturbation = parse_json_arg(args.perturbation, "test perturbation")
    decoder = parse_json_arg(args.decoder, "decoder")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(args.model, revision=args.revision)
    model = load_model(args.model, device, settings["precision"], args.revision)
    prompts = pq.read_table(args.prompts)
    table = SynonymTable.from_arrow(pq.read_table(args.synonyms)) if args.synonyms else None
    out = generate(model, tokenizer, prompts.column("prefix").to_pylist(), prompts.column("prompt_id").to_numpy(),
                   settings["runs"], settings["new_tokens"], perturbation, table, settings["seed"], settings["mode"],
                   settings["batch_size"], decoder, progress=True)
    ids = out["continuation_ids"]
    texts = tokenizer.batch_decode(ids.tolist(), skip_special_tokens=True)
    width = ids.shape[1]
    write_parquet(pa.table({
        "prompt_id": pa.array(out["prompt_id"].astype(np.int64)),
        "run": pa.array(out["run"].astype(np.int32)),
        "continuation_ids": pa.ListArray.from_arrays(pa.array(np.arange(0, ids.size + 1, width, dtype=np.int32)),
                                                     pa.array(ids.reshape(-1).astype(np.int32))),
        "text": pa.array(texts),
    }), args.output)
    log.info("%d continuations of %d tokens (%s mode, %s, decoder %s)", len(ids), width, settings["mode"], perturbation,
             decoder or "unbiased")


if __name__ == "__main__":
    run(main)
