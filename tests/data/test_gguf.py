"""A GGUF checkpoint dequantised into a hub-style folder (workflow_lib/data/gguf.py): the real SmolLM2 file's header,
a one-layer Llama with SmolLM2's tokenizer dequantised for real, and the files that must fail, naming the key."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from support.gguf_files import foreign_gguf, smollm2_gguf, tiny_llama_gguf
from workflow_lib.cli import StageError
from workflow_lib.data.gguf import check_architecture, dequantise, gguf_header


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workflow_lib.data.gguf", *args], capture_output=True, text=True, timeout=300
    )


def test_the_wheels_smollm2_header_is_read_without_loading_its_tensors():
    header = gguf_header("smollm2", smollm2_gguf())
    assert header == {"architecture": "llama", "tensors": 272, "bytes": smollm2_gguf().stat().st_size}


def test_a_file_that_is_not_gguf_a_cut_header_and_a_truncated_file_each_name_the_key(tmp_path, tiny):
    (tmp_path / "page.gguf").write_text("<html>not found</html>")
    with pytest.raises(StageError, match=r"models\.m\.gguf: .*page\.gguf is not a GGUF file"):
        gguf_header("m", tmp_path / "page.gguf")
    data = tiny.read_bytes()
    (tmp_path / "head.gguf").write_bytes(data[:200])  # inside the tokenizer's metadata
    with pytest.raises(StageError, match=r"models\.m\.gguf: .*head\.gguf is truncated or damaged"):
        gguf_header("m", tmp_path / "head.gguf")
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) - 1000])  # the header whole, the last tensor short
    with pytest.raises(StageError, match=r"models\.m\.gguf: .*cut\.gguf is truncated or damaged"):
        gguf_header("m", tmp_path / "cut.gguf")
    with pytest.raises(StageError, match=r"models\.m\.gguf: no such file"):
        gguf_header("m", tmp_path / "absent.gguf")


def test_an_architecture_transformers_cannot_dequantise_is_refused_naming_the_key(tmp_path):
    path = foreign_gguf(tmp_path / "foreign.gguf", "nonesuch")
    assert gguf_header("m", path)["architecture"] == "nonesuch"
    with pytest.raises(StageError, match=r"models\.m\.gguf: architecture 'nonesuch' cannot be dequantised .*llama"):
        check_architecture("m", "nonesuch")
    check_architecture("m", "llama")
    for section in ("general", "tokenizer"):  # keys of transformers' GGUF map that are no model
        with pytest.raises(StageError):
            check_architecture("m", section)


def test_the_cli_fails_in_one_line_naming_the_key_and_writes_nothing(tmp_path, tiny):
    (tmp_path / "cut.gguf").write_bytes(tiny.read_bytes()[:-1000])
    foreign_gguf(tmp_path / "foreign.gguf")
    for name, message in (
        ("cut.gguf", "is truncated or damaged"),
        ("foreign.gguf", "architecture 'nonesuch' cannot be dequantised"),
    ):
        done = cli("--key", "smol", "--source", "{}", "--gguf", str(tmp_path / name), "--output", str(tmp_path / "out"))
        assert done.returncode == 1
        last = done.stderr.strip().splitlines()[-1]
        assert "models.smol.gguf" in last and message in last, last
        assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_dequantised_folder_loads_as_a_checkpoint_with_the_files_logits_and_tokenizer_and_repeats(
    tmp_path, tiny, monkeypatch
):
    import gguf
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    parses = []
    monkeypatch.setattr(
        gguf, "GGUFReader", lambda path, mode="r", read=gguf.GGUFReader: parses.append(mode) or read(path, mode)
    )
    record = dequantise("tiny", tiny, tmp_path / "a")
    assert parses == ["r"]  # header, config, weights and tokenizer share one parse of the file
    monkeypatch.undo()
    assert record["architecture"] == "llama" and record["sha256"] == hashlib.sha256(tiny.read_bytes()).hexdigest()
    folder = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    original = AutoModelForCausalLM.from_pretrained(tiny.parent, gguf_file=tiny.name, dtype=torch.float32)
    assert not hasattr(folder.config, "quantization_config")
    ids = torch.tensor([[1, 300, 2000, 45000, 7, 7, 9]])
    with torch.no_grad():
        assert torch.equal(folder(ids).logits, original(ids).logits)
    text = "The licence grants permission to copy, modify and distribute."
    assert (
        AutoTokenizer.from_pretrained(tmp_path / "a")(text)["input_ids"]
        == AutoTokenizer.from_pretrained(tiny.parent, gguf_file=tiny.name)(text)["input_ids"]
    )
    dequantise("tiny", tiny, tmp_path / "b")  # same file, same bytes
    for name in ("model.safetensors", "config.json", "tokenizer.json", "gguf.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_a_copy_that_computes_other_logits_is_refused(tmp_path, tiny, monkeypatch):
    import torch

    loaded = torch.nn.Module.load_state_dict

    def shifted(module, state, *args, **kwargs):  # the copy's first weight moved by 1e-3 after loading
        out = loaded(module, state, *args, **kwargs)
        with torch.no_grad():
            next(module.parameters()).add_(1e-3)
        return out

    monkeypatch.setattr(torch.nn.Module, "load_state_dict", shifted)
    with pytest.raises(StageError, match=r"models\.tiny\.gguf: the saved copy computes other logits"):
        dequantise("tiny", tiny, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    import gguf

    assert isinstance(gguf.GGUFReader, type)  # the shared reader is gone once the job's loading is done
