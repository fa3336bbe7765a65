"""The pretrained-model path (`source: hf`, a local folder) for every family users bring, offline.

Each family's tiny checkpoint (studies/families.py) is saved as its hub original is (storage dtype, head
layout, attention kind, tokenizer special tokens and BOS behaviour); the tests check what the workflow's code
computes with it against the model's own plain forward pass.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from studies.families import BOS_PREPENDED, FAMILIES, LOCAL_WINDOW, STORED_DTYPE, UNTIED, make_checkpoint
from workflow_lib.cli import StageError
from workflow_lib.models import load_input_embeddings, load_pretrained
from workflow_lib.perturb.synonym_table import SynonymTable
from workflow_lib.perturb.synonyms import embedding_synonyms, special_token_ids
from workflow_lib.sample import decoding, loops, sampler, steps

NEW_TOKENS = 12
WORD_COUNTS = (3, 9, 17, 26)  # prompts of different lengths, most longer than GPT-Neo's local window


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py: tiny models on one thread


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    from workflow_lib.data.builtin_corpus import build_grammar

    return build_grammar(seed=3, words_per_class=4).generate("train", 20, 8, 0)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, corpus) -> dict:
    root = tmp_path_factory.mktemp("families")
    return {family: make_checkpoint(root, family, corpus) for family in FAMILIES}


@pytest.fixture(scope="module")
def prompts(corpus) -> list[str]:
    words = corpus[1].split()
    return [" ".join(words[i : i + n]) for i, n in enumerate(WORD_COUNTS)]


@pytest.fixture(scope="module")
def loaded(checkpoints):
    """family -> its tokenizer and float32 sampling model (sampler.load_model), each loaded once."""
    from transformers import AutoTokenizer

    cache = {}

    def load(family):
        if family not in cache:
            folder = checkpoints[family]
            cache[family] = AutoTokenizer.from_pretrained(folder), sampler.load_model(str(folder), "cpu")
        return cache[family]

    return load


def pad_id_of(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def hf_spec(folder) -> dict:
    return {"source": "hf", "name": str(folder), "load_dtype": "float32"}


def right_padded(tokenizer, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask [B, L], padded on the right as training batches are."""
    encoded = [tokenizer(t)["input_ids"] for t in texts]
    ids = torch.full((len(encoded), max(map(len, encoded))), pad_id_of(tokenizer))
    mask = torch.zeros_like(ids)
    for row, e in enumerate(encoded):
        ids[row, : len(e)], mask[row, : len(e)] = torch.tensor(e), 1
    return ids, mask


def unpadded_last_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0, -1].float()


@pytest.mark.parametrize("family", FAMILIES)
def test_checkpoint_is_saved_like_the_hub_original(checkpoints, family):
    import json

    from safetensors import safe_open
    from transformers import AutoTokenizer

    folder = checkpoints[family]
    config = json.loads((folder / "config.json").read_text())
    assert config["torch_dtype"] == STORED_DTYPE[family]
    with safe_open(folder / "model.safetensors", "pt") as handle:
        stored = {handle.get_slice(name).get_dtype() for name in handle.keys()}  # noqa: SIM118 - safe_open is not iterable
    assert stored == {{"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[STORED_DTYPE[family]]}
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert config["vocab_size"] == len(tokenizer)
    first = tokenizer("the cat")["input_ids"][0]
    if family in BOS_PREPENDED:
        assert tokenizer.convert_ids_to_tokens(first) == BOS_PREPENDED[family] == tokenizer.bos_token
    else:
        assert first != tokenizer.bos_token_id
    assert (tokenizer.pad_token is None) == (family in ("gpt2", "gpt-neo", "llama", "gpt-neox"))


@pytest.mark.parametrize("family", FAMILIES)
def test_load_pretrained_gives_finite_float32_weights(checkpoints, family):
    from transformers import AutoModelForCausalLM

    model = load_pretrained(family, hf_spec(checkpoints[family]))
    stored = AutoModelForCausalLM.from_pretrained(checkpoints[family], dtype="auto")
    assert next(stored.parameters()).dtype == getattr(torch, STORED_DTYPE[family])
    for (name, p), (_, q) in zip(model.named_parameters(), stored.named_parameters(), strict=True):
        assert p.dtype == torch.float32, name
        assert torch.isfinite(p).all(), name
        assert torch.equal(p, q.float()), name  # upcasting is exact: the stored weights, nothing else


@pytest.mark.parametrize("family", FAMILIES)
def test_load_pretrained_auto_keeps_the_stored_dtype(checkpoints, family):
    model = load_pretrained(family, {**hf_spec(checkpoints[family]), "load_dtype": "auto"})
    assert {p.dtype for p in model.parameters()} == {getattr(torch, STORED_DTYPE[family])}


@pytest.mark.parametrize("family", FAMILIES)
def test_target_logits_equal_the_full_forward(loaded, prompts, family):
    from workflow_lib.train.forward import target_logits

    tokenizer, model = loaded(family)
    ids, mask = right_padded(tokenizer, prompts)
    row, pos = mask.nonzero(as_tuple=True)
    batch = {"input_ids": ids, "attention_mask": mask, "target_row": row, "target_pos": pos}
    with torch.no_grad():
        gathered = target_logits(model, batch)
        full = model(input_ids=ids, attention_mask=mask).logits[row, pos]
    assert gathered.shape == (len(row), len(tokenizer))
    torch.testing.assert_close(gathered, full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_left_padded_batch_equals_each_prompt_alone(loaded, prompts, family):
    tokenizer, model = loaded(family)
    encoded = [tokenizer(p)["input_ids"] for p in prompts]
    values = torch.tensor([t for e in encoded for t in e])
    offsets = torch.tensor(np.concatenate([[0], np.cumsum([len(e) for e in encoded])]))
    ids, mask, positions = loops.left_pad(values, offsets, pad_id_of(tokenizer), loops.context_length(model))
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1]
        shifted = model(input_ids=ids, attention_mask=mask, position_ids=positions + 3).logits[:, -1]
    alone = torch.stack([unpadded_last_logits(model, e) for e in encoded])
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=0)
    if family not in ("llama", "gpt-neox"):  # learned absolute positions: the position ids were really used
        assert (shifted - alone).abs().max() > 1e-2


@pytest.mark.parametrize("family", FAMILIES)
def test_masked_slots_inside_the_context_change_only_windowed_families(loaded, family):
    """Why cached insertion/deletion is refused for GPT-Neo: a masked slot inside its local window shrinks it."""
    _, model = loaded(family)
    ids = torch.arange(20) % 200 + 5
    holed = torch.cat([ids[:5], torch.tensor([3]), ids[5:16], torch.tensor([3, 3]), ids[16:]])[None]
    mask = torch.ones_like(holed)
    mask[0, [5, 17, 18]] = 0
    with torch.no_grad():
        out = model(input_ids=holed, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits[0, -1]
    gap = float((out - unpadded_last_logits(model, ids.tolist())).abs().max())
    assert loops.attention_window(model) == (LOCAL_WINDOW if family == "gpt-neo" else None)
    assert gap > 1e-2 if family == "gpt-neo" else gap < 1e-5


def sample(model, tokenizer, prompts, mode, strategy="insertion", intensity=0.0, table=None, seed=5):
    return sampler.generate(
        model,
        tokenizer,
        prompts,
        np.arange(len(prompts)) * 10,
        runs=2,
        new_tokens=NEW_TOKENS,
        perturbation={"strategy": strategy, "intensity": intensity},
        table=table,
        seed=seed,
        mode=mode,
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_exact_and_cached_samplers_agree_at_intensity_zero(loaded, prompts, family):
    tokenizer, model = loaded(family)
    exact = sample(model, tokenizer, prompts, "exact")
    cached = sample(model, tokenizer, prompts, "cached")
    for column in ("prompt_id", "run", "continuation_ids"):
        np.testing.assert_array_equal(exact[column], cached[column])
    ids = exact["continuation_ids"]
    assert ids.shape == (2 * len(prompts), NEW_TOKENS)
    assert not np.isin(ids, [tokenizer.eos_token_id]).any()
    assert len(np.unique(ids)) > NEW_TOKENS  # a real sample, not one token repeated


def embedding_table(checkpoints, loaded, family):
    tokenizer, model = loaded(family)
    embeddings = load_input_embeddings({**hf_spec(checkpoints[family]), "key": family})
    np.testing.assert_array_equal(embeddings, model.get_input_embeddings().weight.detach().numpy())
    return embedding_synonyms(embeddings, 5, special_token_ids(tokenizer), len(tokenizer)), embeddings


@pytest.mark.parametrize("family", FAMILIES)
def test_embedding_synonyms_are_input_embedding_neighbours(loaded, checkpoints, family):
    tokenizer, _ = loaded(family)
    table, embeddings = embedding_table(checkpoints, loaded, family)
    special = special_token_ids(tokenizer)
    offsets = np.asarray(table.offsets)
    has = offsets[1:] > offsets[:-1]
    assert not has[special].any() and has.sum() == len(tokenizer) - len(special)
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    for token in np.flatnonzero(has)[::37]:
        cosine = unit @ unit[token]
        cosine[[token, *special]] = -np.inf
        neighbours = np.asarray(table.candidates)[offsets[token] : offsets[token + 1]]
        assert set(neighbours.tolist()) == set(np.argsort(-cosine)[:5].tolist())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strategy", ["insertion", "deletion", "replacement"])
def test_perturbed_sampling_runs_with_embedding_synonyms(loaded, checkpoints, prompts, family, strategy):
    tokenizer, model = loaded(family)
    table, _ = embedding_table(checkpoints, loaded, family)
    for mode in ("exact", "cached"):
        if mode == "cached" and family == "gpt-neo" and strategy != "replacement":
            with pytest.raises(ValueError, match="use mode exact"):
                sample(model, tokenizer, prompts, mode, strategy, 0.3, table)
            continue
        out = sample(model, tokenizer, prompts, mode, strategy, 0.3, table)
        ids = out["continuation_ids"]
        assert ids.shape == (2 * len(prompts), NEW_TOKENS)
        assert ((ids >= 0) & (ids < len(tokenizer))).all()
        assert not np.isin(ids, [tokenizer.eos_token_id]).any()


class ForwardRecorder:
    """Wraps a model's forward: the ids it was fed and the masks, call by call."""

    def __init__(self, model):
        self.calls = []
        self.forward = model.forward

    def __call__(self, *args, **kwargs):
        self.calls.append((kwargs["input_ids"].clone(), kwargs["attention_mask"].clone()))
        return self.forward(*args, **kwargs)


class DrawRecorder:
    """Wraps decoding.draw: the logits each step drew from."""

    def __init__(self):
        self.logits = []
        self.draw = decoding.draw

    def __call__(self, logits, u, **kwargs):
        self.logits.append(logits.detach().float().clone())
        return self.draw(logits, u, **kwargs)


def suppressed_probs(logits: torch.Tensor, tokenizer) -> torch.Tensor:
    logits = logits.clone()
    logits[..., tokenizer.eos_token_id] = float("-inf")
    return torch.softmax(logits, dim=-1)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "gpt-neo"])
@pytest.mark.parametrize("strategy", ["insertion", "deletion"])
def test_cached_sampler_draws_from_the_law_of_what_it_fed(loaded, checkpoints, prompts, family, strategy, monkeypatch):
    """The cache (masked slots for deleted tokens and empty insertion slots, position ids that skip them; an
    insertion fed to the inserting rows alone) gives each step the model's law of the perturbed prefix it fed,
    recomputed here without padding or cache."""
    tokenizer, model = loaded(family)
    table, _ = embedding_table(checkpoints, loaded, family)
    forwards, draws, feeds = ForwardRecorder(model), DrawRecorder(), []
    forward, insert = loops.Cached.forward, loops.Cached.insert
    monkeypatch.setattr(model, "forward", forwards)  # its first call feeds the perturbed prompts
    monkeypatch.setattr(steps, "draw", draws)  # the one sampling loop draws here
    monkeypatch.setattr(loops.Cached, "forward", lambda self, *a: (feeds.append(("all", *a)), forward(self, *a))[1])
    monkeypatch.setattr(loops.Cached, "insert", lambda self, *a: (feeds.append(("some", *a)), insert(self, *a))[1])
    sample(model, tokenizer, prompts, "cached", strategy, 0.5, table)
    monkeypatch.undo()
    ids, mask = forwards.calls[0]
    fed = [ids[row][mask[row] > 0].tolist() for row in range(len(ids))]
    if strategy == "deletion":
        assert any((chunk_mask == 0).any() for kind, _, chunk_mask in feeds)  # masked slots were fed
    else:
        assert any(kind == "some" for kind, *_ in feeds) and all(
            chunk.shape[1] == 1 for k, chunk, _ in feeds if k == "all"
        )
    steps_fed = [[]]
    for feed in feeds:
        if feed[0] == "all" and steps_fed[-1]:
            steps_fed.append([])
        steps_fed[-1].append(feed)
    assert len(steps_fed) == len(draws.logits) == NEW_TOKENS  # the last feed is never drawn from
    for drawn, step in zip(draws.logits, steps_fed, strict=True):
        expected = torch.stack([unpadded_last_logits(model, f) for f in fed])
        torch.testing.assert_close(
            suppressed_probs(drawn, tokenizer), suppressed_probs(expected, tokenizer), atol=1e-6, rtol=0
        )
        for kind, chunk, flags in step:
            for row in range(len(fed)):
                if kind == "all":
                    fed[row].extend(chunk[row][flags[row] > 0].tolist())
                elif flags[row]:
                    fed[row].append(int(chunk[row]))


def sampled_laws(checkpoints, prompts, family, precision, monkeypatch):
    """The next-token laws generate() drew from (exact mode, intensity 0), and the float32 model's laws of the
    same prefixes, each prefix alone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = checkpoints[family]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = sampler.load_model(str(folder), "cpu", precision)
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    draws = DrawRecorder()
    monkeypatch.setattr(steps, "draw", draws)  # the one sampling loop draws here
    out = sample(model, tokenizer, prompts, "exact")
    encoded = [tokenizer(p)["input_ids"] for p in prompts]
    rows = [encoded[p // 10] for p in out["prompt_id"]]
    drawn, expected = [], []
    for step, logits in enumerate(draws.logits):
        drawn.append(suppressed_probs(logits, tokenizer))
        prefixes = [row + out["continuation_ids"][i, :step].tolist() for i, row in enumerate(rows)]
        expected.append(
            suppressed_probs(torch.stack([unpadded_last_logits(reference, p) for p in prefixes]), tokenizer)
        )
    return torch.stack(drawn), torch.stack(expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_fp32_sampling_draws_from_the_float32_softmax(checkpoints, prompts, family, monkeypatch):
    drawn, expected = sampled_laws(checkpoints, prompts, family, "fp32", monkeypatch)
    torch.testing.assert_close(drawn, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_sampling_moves_the_law(checkpoints, prompts, family, monkeypatch):
    """sampling.precision bf16 runs the model in bfloat16: its laws are not the float32 model's (TV printed with -s)."""
    drawn, expected = sampled_laws(checkpoints, prompts, family, "bf16", monkeypatch)
    tv = 0.5 * (drawn.double() - expected.double()).abs().sum(-1)
    print(f"\n{family}: bf16 vs fp32 next-token law, TV mean {tv.mean():.2e} max {tv.max():.2e} over {tv.numel()} laws")
    assert tv.max() > 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_featurize_is_the_last_tokens_hidden_state_whatever_the_padding(loaded, checkpoints, prompts, family):
    from workflow_lib.evaluate.features import featurize

    tokenizer, model = loaded(family)
    features = featurize(prompts, str(checkpoints[family]), max_length=128, batch_size=8, device="cpu")
    assert features.shape == (len(prompts), model.config.hidden_size)
    assert features.dtype == np.float32 and np.isfinite(features).all()
    for i, text in enumerate(prompts):
        alone = featurize([text], str(checkpoints[family]), max_length=128, device="cpu")[0]
        np.testing.assert_allclose(features[i], alone, atol=1e-5, rtol=0)
        with torch.no_grad():
            hidden = model.base_model(input_ids=torch.tensor([tokenizer(text)["input_ids"]])).last_hidden_state[0, -1]
        np.testing.assert_allclose(alone, hidden.numpy(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_emo_cost_embedding_is_the_output_embedding_and_trains(loaded, checkpoints, prompts, family):
    from workflow_lib.train.forward import target_logits
    from workflow_lib.train.objectives import cost_embedding_of, get

    tokenizer, _ = loaded(family)
    model = load_pretrained(family, hf_spec(checkpoints[family]))
    model.train()
    cost = cost_embedding_of(model)
    output = F.normalize(model.get_output_embeddings().weight.detach().float(), dim=-1)
    inputs = F.normalize(model.get_input_embeddings().weight.detach().float(), dim=-1)
    torch.testing.assert_close(cost, output, atol=0, rtol=0)
    assert (family in UNTIED) == (not torch.allclose(cost, inputs))
    ids, mask = right_padded(tokenizer, prompts)
    row, pos = (mask[:, 1:] > 0).nonzero(as_tuple=True)  # predict each next real token
    batch = {"input_ids": ids, "attention_mask": mask, "target_row": row, "target_pos": pos}
    loss = get("emo")(target_logits(model, batch), ids[row, pos + 1], cost_embedding=cost)
    loss.backward()
    assert torch.isfinite(loss)
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_load_model_gives_float32_and_refuses_a_nan_weight(checkpoints, family, tmp_path):
    from safetensors.torch import load_file, save_file

    model = sampler.load_model(str(checkpoints[family]), "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    broken = tmp_path / family
    shutil.copytree(checkpoints[family], broken)
    weights = load_file(broken / "model.safetensors")
    name = max(weights)
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(StageError, match="not finite"):
        sampler.load_model(str(broken), "cpu")


@pytest.mark.parametrize("family", [f for f in FAMILIES if f != "gpt-neo"])
def test_cached_insertion_fed_to_the_inserting_rows_alone_keeps_the_one_pass_law(loaded, prompts, family):
    """Cached mode feeds an insertion to the rows that insert only (`Cached.insert`), not a second, masked slot to
    every row: at every step every row's next-token logits agree with the one pass of both slots within float32
    rounding (the reference: `split_insertions = False`), and so do the tokens drawn here."""
    tokenizer, model = loaded(family)
    table = SynonymTable.uniform(len(tokenizer), special_token_ids(tokenizer)).to("cpu")
    encoded = [tokenizer(p)["input_ids"] for p in prompts * 3]
    values = torch.tensor([i for e in encoded for i in e])
    offsets = torch.tensor(np.concatenate([[0], np.cumsum([len(e) for e in encoded])]))
    batch = steps.Batch(
        values,
        offsets,
        decoding.row_keys(3, torch.arange(len(encoded)), torch.zeros(len(encoded), dtype=torch.long)),
        NEW_TOKENS,
        {"strategy": "insertion", "intensity": 0.3},
        table,
        special_token_ids(tokenizer),
        pad_id_of(tokenizer),
        [tokenizer.eos_token_id],
    )
    traces: dict = {}

    def traced(split: bool):
        class Traced(loops.Cached):
            split_insertions = split

            def logits(self, step, key, generated):
                traces.setdefault(split, []).append(self.next.clone())
                return super().logits(step, key, generated)

        return Traced

    split, one_pass = steps.sample(model, batch, traced(True)), steps.sample(model, batch, traced(False))
    gaps = [float((a - b).abs().max()) for a, b in zip(traces[True], traces[False], strict=True)]
    assert max(gaps) < 5e-5, gaps  # measured: 8.8e-6 (llama), 2.4e-6 (gpt2)
    torch.testing.assert_close(split, one_pass, rtol=0, atol=0)
