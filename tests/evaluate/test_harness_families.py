"""lm-evaluation-harness on every hub-like family (studies/families.py): the rolling log-likelihood lm-eval gives each
document (evaluate/harness.py, an eval set as a task of its own) equals the model's own forward pass over lm-eval's
prefix token and the document as the family's tokenizer encodes it by default. For the tokenizers that prepend a BOS
(OPT's, Llama's), that default includes the BOS, which lm-eval then scores as the document's first token."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from studies.families import BOS_PREPENDED, FAMILIES, make_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py: tiny models on one thread
WORDS = (5, 9, 14, 20)


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    from workflow_lib.data.builtin_corpus import build_grammar

    return build_grammar(seed=3, words_per_class=4).generate("train", 20, 8, 0)


@pytest.fixture(scope="module")
def references(tmp_path_factory, corpus) -> tuple[list[str], str]:
    texts = [" ".join(corpus[i].split()[:n]) for i, n in enumerate(WORDS)]
    path = tmp_path_factory.mktemp("eval_set") / "toy.parquet"
    pl.DataFrame({"prompt_id": list(range(len(texts))), "reference": texts}).write_parquet(path)
    return texts, str(path)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_harness_scores_each_family_as_its_own_forward_pass(tmp_path, corpus, references, family):
    from transformers import AutoTokenizer

    from workflow_lib.evaluate.harness import evaluate
    from workflow_lib.sample.sampler import load_model

    folder = make_checkpoint(tmp_path, family, corpus)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = load_model(str(folder), "cpu")
    texts, path = references
    settings = {"tasks": [], "limit": None, "seed": 0, "batch_size": 4}
    samples = sorted(
        evaluate(model, tokenizer, settings, None, {"toy": path})["samples"]["toy"], key=lambda s: s["doc_id"]
    )
    scored = [float(s["word_perplexity"][0]) for s in samples]
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    own = []
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert (ids[0] == tokenizer.bos_token_id) == (family in BOS_PREPENDED)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([[prefix, *ids]])).logits[0, :-1].double()
        own.append(float(torch.log_softmax(logits, -1)[torch.arange(len(ids)), torch.tensor(ids)].sum()))
    assert scored == pytest.approx(own, abs=1e-3)
    assert [s["word_perplexity"][1] for s in samples] == [len(t.split()) for t in texts]  # the words it divides by
