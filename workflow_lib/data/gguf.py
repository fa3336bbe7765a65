"""A GGUF checkpoint dequantised once into a hub-style float32 folder (workflow_lib/pretrained.py says where the
file comes from and where the folder goes).

transformers dequantises GGUF files to float32 (`from_pretrained(folder, gguf_file=...)`), but a model loaded so
refuses `save_pretrained` ("quantized with gguf and is not serializable"), and reloading the GGUF in every job would
cost each one the dequantisation. So this job copies the weights into a plain model of the same config, checks that
it computes the same logits, and saves it with the file's own tokenizer: every later job loads the folder as any
local checkpoint. What fails here and how a model names its file: docs/studies.md, "A GGUF checkpoint as a model".
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from workflow_lib.cli import StageError, parse_json_arg, run
from workflow_lib.files import atomic_path, sha256_file, write_json

log = logging.getLogger("workflow_lib.data.gguf")
GGUF_MAGIC = b"GGUF"
NOT_ARCHITECTURES = ("general", "tokenizer")  # sections of transformers' GGUF key map, not models


def gguf_header(key: str, path: str | Path) -> dict:
    """The file's architecture, tensor count and size, read from its header (the tensor data is memory-mapped, not
    read). Raises, naming the key, for a file that is not GGUF or is cut short (its tensors' views would run past
    the end of the file)."""
    what = f"models.{key}.gguf"
    path = Path(path)
    if not path.is_file():
        raise StageError(f"{what}: no such file {str(path)!r}")
    with open(path, "rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            raise StageError(f"{what}: {path} is not a GGUF file (it does not start with the bytes 'GGUF')")
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as error:  # a file cut short: the reader's views of its metadata or tensors run past the end
        raise StageError(
            f"{what}: {path} is truncated or damaged: not a readable GGUF file ({type(error).__name__}: {error})"
        ) from error
    field = reader.get_field("general.architecture")
    if field is None:
        raise StageError(f"{what}: {path} has no general.architecture field")
    return {"architecture": field.contents(), "tensors": len(reader.tensors), "bytes": path.stat().st_size}


@contextlib.contextmanager
def one_reader() -> Iterator[None]:
    """Each file is parsed once inside the block. transformers builds a new `gguf.GGUFReader` for the config, for the
    weights and for the tokenizer, and the reader walks every metadata string in Python: SmolLM2's 49,152 tokens and
    their merges take seconds a parse, and a dequantisation parsed the file four times (docs/benchmarks.md). A reader
    opened read-only ("r") is a memory map nothing writes to, so one serves every call."""
    import gguf

    original = gguf.GGUFReader
    readers: dict[tuple[str, str], object] = {}

    def shared(path, mode="r"):
        if mode != "r":
            return original(path, mode)
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared  # type: ignore[misc, assignment]  # transformers looks it up at each call
    try:
        yield
    finally:
        gguf.GGUFReader = original  # type: ignore[misc]


def check_architecture(key: str, architecture: str) -> None:
    """transformers dequantises only the architectures it maps to its own models."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if architecture not in GGUF_SUPPORTED_ARCHITECTURES or architecture in NOT_ARCHITECTURES:
        readable = sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - set(NOT_ARCHITECTURES))
        raise StageError(
            f"models.{key}.gguf: architecture {architecture!r} cannot be dequantised by transformers "
            f"(it reads {', '.join(readable)}); use a hub checkpoint (`name`) instead"
        )


def hub_file(key: str, source: dict) -> Path:
    """A hub repository's GGUF file, through the hub client's cache (offline: the cache only)."""
    from huggingface_hub import hf_hub_download

    from workflow_lib.hub import hub_unreachable

    if why := hub_unreachable(source["repo"]):
        raise StageError(
            f"models.{key}.gguf.repo: could not fetch {source['file']!r} from {source['repo']!r}: {why}; "
            "without network, use gguf.path (a local file) or gguf.url"
        )
    try:
        return Path(hf_hub_download(source["repo"], source["file"], revision=source.get("revision")))
    except Exception as error:
        raise StageError(
            f"models.{key}.gguf: could not fetch {source['file']!r} from {source['repo']!r}: "
            f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        ) from error


def dequantise(key: str, path: Path, output: str | Path) -> dict:
    """Load the GGUF file as float32, copy it into a plain model of the same config and save that with the file's
    tokenizer in `output` (atomically). Returns the record written beside it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workflow_lib.data.tokenization import save_tokenizer

    with one_reader():
        header = gguf_header(key, path)
        check_architecture(key, header["architecture"])
        log.info(
            "%s: %s, %d tensors, %.1f MB; dequantising to float32",
            path.name,
            header["architecture"],
            header["tensors"],
            header["bytes"] / 1e6,
        )
        try:
            loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        except Exception as error:
            raise StageError(
                f"models.{key}.gguf: transformers could not read {path}: {type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}"
            ) from error
    config = loaded.config
    for attribute in ("quantization_config", "_name_or_path"):
        if hasattr(config, attribute):
            delattr(config, attribute)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.eval()
    loaded.eval()
    probe = torch.arange(1, 17).remainder(config.vocab_size).unsqueeze(0)
    with torch.no_grad():
        want, got = loaded(probe).logits, plain(probe).logits
    if not torch.isfinite(got).all():
        raise StageError(f"models.{key}.gguf: the dequantised model's logits are not finite; nothing is written")
    if not torch.equal(want, got):
        raise StageError(
            f"models.{key}.gguf: the saved copy computes other logits than the GGUF file "
            f"(max difference {(want - got).abs().max().item():.3g}); nothing is written"
        )
    record = {
        "gguf_file": path.name,
        "sha256": sha256_file(path),
        "architecture": header["architecture"],
        "parameters": sum(p.numel() for p in plain.parameters()),
        "model_class": type(plain).__name__,
    }
    with atomic_path(output) as tmp:
        plain.save_pretrained(tmp)
        save_tokenizer(tokenizer, tmp)
        write_json(record, Path(tmp) / "gguf.json")
    log.info(
        "saved %s (%s, %s parameters) with its tokenizer (%d tokens) to %s",
        record["model_class"],
        header["architecture"],
        f"{record['parameters']:,}",
        len(tokenizer),
        output,
    )
    return record


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m workflow_lib.data.gguf", description=__doc__.splitlines()[0])
    parser.add_argument("--key", required=True, help="the model's key in `models`")
    parser.add_argument(
        "--source", required=True, help="the GGUF source's settings, as JSON (pretrained.gguf_settings)"
    )
    parser.add_argument("--gguf", help="the local GGUF file (absent for a hub repo's, which is downloaded here)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    source = parse_json_arg(args.source, f"models.{args.key}.gguf")
    path = Path(args.gguf) if args.gguf else hub_file(args.key, source)
    log.info("model %s from %s", args.key, path)
    dequantise(args.key, path, args.output)


if __name__ == "__main__":
    run(main)
