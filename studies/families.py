"""Tiny checkpoints of the model families users bring, saved the way their hub originals are.

`make_checkpoint(root, family, texts)` writes a folder that `AutoTokenizer` / `AutoModelForCausalLM` load
offline, as a hub id would: a tokenizer learnt from `texts` with the family's special tokens and BOS
behaviour, and a randomly initialised 2-layer model in the family's storage dtype and head layout.

What each family brings that a GPT-2-only test would miss:
- gpt2: the reference (tied head, float32, end-of-text as BOS = EOS = UNK, no pad, no BOS added), with
  end-of-text as the LAST id as in the hub file.
- opt: float16 on disk (`torch_dtype: float16` in config.json, as facebook/opt-125m), `</s>` prepended to
  every text, `<pad>` = 1 as pad token, learned positions offset by 2.
- gpt-neo: alternating global and local attention with a window (8) shorter than the prompts.
- llama: untied output embedding, grouped-query attention, bfloat16 on disk, a SentencePiece-style BPE
  (metaspace, byte fallback) that prepends `<s>`, no pad token.
- gpt-neox (Pythia): untied `embed_out`, rotary on a quarter of each head, float16 on disk,
  `<|endoftext|>` = 0 as BOS = EOS = UNK and `<|padding|>` = 1 an added token, no BOS added.
"""

from __future__ import annotations

import json
from pathlib import Path

FAMILIES = ("gpt2", "opt", "gpt-neo", "llama", "gpt-neox")
UNTIED = ("llama", "gpt-neox")
STORED_DTYPE = {"gpt2": "float32", "opt": "float16", "gpt-neo": "float32", "llama": "bfloat16", "gpt-neox": "float16"}
BOS_PREPENDED = {"opt": "</s>", "llama": "<s>"}
POSITIONS = 128
LOCAL_WINDOW = 8
# Larger than the families' 0.02: the random model's next-token laws are far from uniform, so a wrong position,
# mask or head changes the logits by much more than the tests' tolerances.
INIT_STD = 0.2


def learn_byte_level_bpe(texts: list[str], vocab_size: int, special_tokens: list[str]) -> tuple[dict, list]:
    """GPT-2's byte-level BPE learnt from `texts`, special tokens first (ids 0, 1, ...): vocab and merges."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        texts, vocab_size=vocab_size, min_frequency=2, special_tokens=special_tokens, show_progress=False
    )
    return _vocab_and_merges(bpe._tokenizer)


def learn_sentencepiece_bpe(texts: list[str], vocab_size: int, special_tokens: list[str]) -> tuple[dict, list]:
    """Llama's BPE: words marked by a leading '▁', bytes <0x00>..<0xFF> as fallback for unseen characters."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=special_tokens[0], byte_fallback=True, fuse_unk=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size + len(byte_tokens),
        min_frequency=2,
        special_tokens=special_tokens + byte_tokens,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return _vocab_and_merges(tokenizer)


def _vocab_and_merges(tokenizer) -> tuple[dict, list]:
    model = json.loads(tokenizer.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    return dict(model["vocab"]), merges


def make_tokenizer(family: str, texts: list[str], vocab_size: int = 300):
    from transformers import GPT2Tokenizer, GPTNeoXTokenizer, LlamaTokenizer

    if family in ("gpt2", "gpt-neo"):
        vocab, merges = learn_byte_level_bpe(texts, vocab_size, [])
        vocab["<|endoftext|>"] = len(vocab)  # the last id, as 50256 in GPT-2
        return GPT2Tokenizer(vocab=vocab, merges=merges)
    if family == "opt":
        vocab, merges = learn_byte_level_bpe(texts, vocab_size, ["<s>", "<pad>", "</s>", "<unk>"])
        return GPT2Tokenizer(
            vocab=vocab,
            merges=merges,
            bos_token="</s>",
            eos_token="</s>",
            unk_token="</s>",
            pad_token="<pad>",
            add_bos_token=True,
        )
    if family == "llama":
        vocab, merges = learn_sentencepiece_bpe(texts, vocab_size, ["<unk>", "<s>", "</s>"])
        return LlamaTokenizer(vocab=vocab, merges=merges, add_bos_token=True)
    if family == "gpt-neox":
        vocab, merges = learn_byte_level_bpe(texts, vocab_size, ["<|endoftext|>", "<|padding|>"])
        return GPTNeoXTokenizer(vocab=vocab, merges=merges, pad_token=None)
    raise ValueError(f"unknown family {family!r}; one of {FAMILIES}")


def make_config(family: str, tokenizer):
    """A 2-layer config of the family with its hub checkpoint's structural choices; dropout off."""
    from transformers import GPT2Config, GPTNeoConfig, GPTNeoXConfig, LlamaConfig, OPTConfig

    vocab = len(tokenizer)
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    if family == "gpt2":
        return GPT2Config(
            vocab_size=vocab,
            n_positions=POSITIONS,
            n_embd=32,
            n_layer=2,
            n_head=2,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            initializer_range=INIT_STD,
            **ids,
        )
    if family == "opt":
        return OPTConfig(
            vocab_size=vocab,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            ffn_dim=64,
            max_position_embeddings=POSITIONS,
            word_embed_proj_dim=32,
            do_layer_norm_before=True,
            dropout=0.0,
            attention_dropout=0.0,
            activation_dropout=0.0,
            layerdrop=0.0,
            init_std=INIT_STD,
            pad_token_id=tokenizer.pad_token_id,
            **ids,
        )
    if family == "gpt-neo":
        return GPTNeoConfig(
            vocab_size=vocab,
            max_position_embeddings=POSITIONS,
            hidden_size=32,
            num_layers=2,
            num_heads=2,
            attention_types=[[["global", "local"], 1]],
            window_size=LOCAL_WINDOW,
            intermediate_size=64,
            embed_dropout=0.0,
            attention_dropout=0.0,
            resid_dropout=0.0,
            initializer_range=INIT_STD,
            **ids,
        )
    if family == "llama":
        return LlamaConfig(
            vocab_size=vocab,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=POSITIONS,
            tie_word_embeddings=False,
            attention_dropout=0.0,
            initializer_range=INIT_STD,
            **ids,
        )
    if family == "gpt-neox":
        return GPTNeoXConfig(
            vocab_size=vocab,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            rotary_pct=0.25,
            max_position_embeddings=POSITIONS,
            tie_word_embeddings=False,
            use_parallel_residual=True,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            initializer_range=INIT_STD,
            **ids,
        )
    raise ValueError(f"unknown family {family!r}; one of {FAMILIES}")


def make_checkpoint(root: Path, family: str, texts: list[str]) -> Path:
    """`root/family`: tokenizer and model, as `save_pretrained` writes them for the hub original."""
    import torch
    from transformers import AutoModelForCausalLM

    folder = Path(root) / family
    tokenizer = make_tokenizer(family, texts)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(FAMILIES.index(family))
    model = AutoModelForCausalLM.from_config(make_config(family, tokenizer))
    dtype = STORED_DTYPE[family]
    model.to(getattr(torch, dtype)).save_pretrained(folder)
    # Hub configs written before transformers 5 name the storage dtype `torch_dtype`; keep both keys.
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text())
    config["torch_dtype"] = dtype
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return folder
