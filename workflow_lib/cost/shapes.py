"""A model's size and shape, known before it is downloaded: what the FLOP and memory arithmetic needs.

From, in order: a scratch model's `architecture` (GPT2Config defaults for unset keys, the tokenizer's vocabulary);
a local checkpoint folder's config.json; the Hugging Face cache's config.json (offline); the config.json values of
the hub models the studies use (`KNOWN`, copied from their hub pages). A model found in none has no shape, and
the estimate says so instead of guessing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_lib.model_types import GATED

GPT2_SMALL = {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50257}

# config.json values of hub models (their hub pages): layers, width, heads, FFN width, vocabulary, context.
KNOWN: dict[str, dict[str, Any]] = {
    "gpt2": GPT2_SMALL,
    "openai-community/gpt2": GPT2_SMALL,
    "gpt2-medium": {**GPT2_SMALL, "n_layer": 24, "n_head": 16, "n_embd": 1024},
    "gpt2-large": {**GPT2_SMALL, "n_layer": 36, "n_head": 20, "n_embd": 1280},
    "gpt2-xl": {**GPT2_SMALL, "n_layer": 48, "n_head": 25, "n_embd": 1600},
    "facebook/opt-125m": {
        "num_hidden_layers": 12,
        "hidden_size": 768,
        "num_attention_heads": 12,
        "ffn_dim": 3072,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
    },
    "facebook/opt-350m": {
        "num_hidden_layers": 24,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "ffn_dim": 4096,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
    },
    "facebook/opt-1.3b": {
        "num_hidden_layers": 24,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "ffn_dim": 8192,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
    },
    "EleutherAI/gpt-neo-125m": {
        "num_layers": 12,
        "attention_layers": ["global", "local"] * 6,
        "window_size": 256,
        "hidden_size": 768,
        "num_heads": 12,
        "vocab_size": 50257,
        "max_position_embeddings": 2048,
    },
    "EleutherAI/gpt-neo-1.3B": {
        "num_layers": 24,
        "attention_layers": ["global", "local"] * 12,
        "window_size": 256,
        "hidden_size": 2048,
        "num_heads": 16,
        "vocab_size": 50257,
        "max_position_embeddings": 2048,
    },
    "EleutherAI/gpt-neo-2.7B": {
        "num_layers": 32,
        "attention_layers": ["global", "local"] * 16,
        "window_size": 256,
        "hidden_size": 2560,
        "num_heads": 20,
        "vocab_size": 50257,
        "max_position_embeddings": 2048,
    },
    # configs/examples/lora-7b.yaml: Llama-2-7B (a gated MLP, rotary positions, an untied head of 32000)
    "meta-llama/Llama-2-7b-hf": {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    },
    # the default featuriser (sentence-transformers/all-MiniLM-L6-v2, a BERT encoder)
    "minilm": {
        "num_hidden_layers": 6,
        "hidden_size": 384,
        "num_attention_heads": 12,
        "intermediate_size": 1536,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
    },
}


@dataclass(frozen=True)
class Shape:
    n_layer: int
    d_model: int
    d_ffn: int
    vocab: int
    context: int
    gated: bool = False  # a gated MLP (Llama, Mistral): three FFN matrices, not two
    window: int | None = None  # local or sliding-window attention's span (GPT-Neo), as sample/loops.attention_window
    head: bool = True  # an output head every token multiplies; a featuriser reads the last hidden state, without it

    @property
    def params(self) -> int:
        """All parameters, embeddings and an untied head's share counted once (biases and norms left out: <1%)."""
        return self.n_layer * self.per_layer + self.vocab * self.d_model + self.context * self.d_model

    @property
    def key(self) -> str:
        """Names the shape in a calibration's `shape_rates`."""
        return f"L{self.n_layer}-d{self.d_model}-f{self.d_ffn}-V{self.vocab}" + ("" if self.head else "-nohead")

    @property
    def per_layer(self) -> int:
        return 4 * self.d_model**2 + (3 if self.gated else 2) * self.d_model * self.d_ffn

    @property
    def matmul_params(self) -> int:
        """The parameters every token multiplies: the blocks' and the output head's (PaLM's N, position embeddings
        left out); a headless featuriser's blocks only (MiniLM: 10.6M of its 22.7M parameters)."""
        return self.n_layer * self.per_layer + (self.vocab * self.d_model if self.head else 0)


def _first(config: dict, *keys, default=None):
    return next((config[k] for k in keys if config.get(k) is not None), default)


def from_config(config: dict) -> Shape:
    """A Shape from a transformers config.json (GPT-2, OPT, GPT-Neo, Llama-like and BERT-like key names)."""
    d = _first(config, "n_embd", "hidden_size", "d_model")
    return Shape(
        n_layer=_first(config, "n_layer", "num_hidden_layers", "num_layers"),
        d_model=d,
        d_ffn=_first(config, "n_inner", "intermediate_size", "ffn_dim", default=4 * d),
        vocab=config["vocab_size"],
        context=_first(config, "n_positions", "max_position_embeddings", default=2048),
        gated=config.get("model_type") in GATED,
        window=attention_window(config),
    )


def attention_window(config: dict) -> int | None:
    """The span of a config.json's local or sliding-window layers (GPT-Neo's local layers, a sliding window), else
    None: `sample/loops.attention_window` read from the file, which exact sampling's cache reuse refuses."""
    kinds = [*(config.get("attention_layers") or ()), *(config.get("layer_types") or ())]
    if any(kind in ("local", "sliding_attention") for kind in kinds):
        return config.get("window_size") or config.get("sliding_window")
    return config.get("sliding_window") if config.get("use_sliding_window", True) else None


def hub_config(name: str, revision: str | None = None, workdir: Path | None = None) -> dict | None:
    """config.json of a local folder (relative to the study's working directory), or of a hub id from the local
    Hugging Face cache (never the network)."""
    folder = Path(workdir or ".", Path(name).expanduser())
    if (folder / "config.json").is_file():
        return json.loads((folder / "config.json").read_text())
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json", revision=revision)
    except ValueError:  # not a repo id (HFValidationError): not known
        cached = None
    if isinstance(cached, str):
        return json.loads(Path(cached).read_text())
    return KNOWN.get(name)


def model_shape(config: dict, key: str, workdir: Path | None = None) -> Shape | None:
    """The shape of `models.<key>` (None when neither the config, a folder, the cache nor KNOWN gives it)."""
    spec = config["models"][key]
    if spec["source"] == "scratch":
        tok = config["tokenizers"][spec["tokenizer"]]
        vocab = tok.get("vocab_size", 1024) if tok["source"] == "train" else None
        if vocab is None:
            hub = hub_config(tok["name"], workdir=workdir)
            vocab = hub and hub["vocab_size"]
        if not vocab:
            return None
        arch = {**GPT2_SMALL, **{k: v for k, v in spec.get("architecture", {}).items() if v is not None}}
        return from_config({**arch, "vocab_size": vocab})
    found = model_config(spec, workdir)
    return from_config(found) if found else None


def model_config(spec: dict, workdir: Path | None = None) -> dict | None:
    """config.json of a pretrained `models.<key>` spec: its folder or hub id (a stand-in's own folder: it is what
    runs), else, for a pinned download not yet fetched, its hub name's."""
    found = hub_config(spec["name"], spec.get("revision"), workdir)
    if not found and spec.get("hub"):
        found = hub_config(spec["hub"]["name"], spec["hub"]["revision"], workdir)
    return found


def featuriser_shape(name: str, workdir: Path | None = None) -> Shape | None:
    """The featuriser's shape, without a head: MAUVE's features are the last hidden state (an encoder has no head,
    and a causal LM's is not applied)."""
    from dataclasses import replace

    found = hub_config(name, workdir=workdir)
    return replace(from_config(found), head=False) if found else None
