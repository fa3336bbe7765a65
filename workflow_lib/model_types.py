"""What the workflow must know of a transformers model type that its config.json does not state: one table, read
by the cost model (at Snakefile parse time: standard library only) and the featuriser.

- `decoder`: a causal LM, whose last token has seen the whole text (the featuriser takes it; an encoder's tokens are
  pooled). A config that names a `...ForCausalLM` architecture or sets `is_decoder` is one whatever its type.
- `gated`: its MLP has a gate projection (SwiGLU: three d x d_ffn matrices, not two), which the cost model counts.

Adding a model family: one row here (and, for training, a tiny checkpoint in studies/families.py, tested in tests/studies/test_families.py).
"""

from __future__ import annotations

from typing import NamedTuple


class ModelType(NamedTuple):
    decoder: bool
    gated: bool


TABLE: dict[str, ModelType] = {
    "gpt2": ModelType(decoder=True, gated=False),
    "opt": ModelType(decoder=True, gated=False),
    "gpt_neo": ModelType(decoder=True, gated=False),
    "gpt_neox": ModelType(decoder=True, gated=False),
    "gptj": ModelType(decoder=True, gated=False),
    "llama": ModelType(decoder=True, gated=True),
    "mistral": ModelType(decoder=True, gated=True),
    "qwen2": ModelType(decoder=True, gated=True),
    "gemma": ModelType(decoder=True, gated=True),
    "phi3": ModelType(decoder=True, gated=True),
}
DECODERS = frozenset(name for name, kind in TABLE.items() if kind.decoder)
GATED = frozenset(name for name, kind in TABLE.items() if kind.gated)
