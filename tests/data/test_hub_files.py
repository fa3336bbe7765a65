"""A hub model's released files by name, revision and pinned sha256s (`models.<m>.files`, workflow_lib/data/hub_files.py),
through a loopback hub: studies/httpserver.py answering the hub's resolve URLs (`/<name>/resolve/<revision>/<file>`)
for a tiny Llama checkpoint (studies/families.py), with HF_ENDPOINT pointing at it. configs/real.yaml's SmolLM2 entry,
its values swapped for the tiny files', is fetched at its revision (not `main`'s other bytes), loads, and a wrong
sha256 fails the job naming the key and the file and keeps nothing. At plan time the folder becomes the model's name
and every model that cannot be downloaded so is refused, naming its key."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from studies.httpserver import serve
from studies.served import job_environment
from support.workflow_runs import REPO, SESSION_ENV, snakemake_command, tiny_config, write_config
from workflow_lib.config import ConfigError, validate_config
from workflow_lib.inputs import Inputs
from workflow_lib.pretrained import PRETRAINED_DIR, normalise_gguf

NAME = "someone/tiny-llama"
REVISION = "0123456789abcdef0123456789abcdef01234567"
RELEASED = "results/pretrained/released"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> dict[str, bytes]:
    """A tiny Llama's files as the hub serves them: config, safetensors weights, tokenizer."""
    from studies.families import make_checkpoint

    texts = [f"the cat {i} sat on the mat and the dog {i} ran" for i in range(40)]
    folder = make_checkpoint(tmp_path_factory.mktemp("hub"), "llama", texts)
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file()}


def hub_paths(files: dict[str, bytes], revision: str = REVISION) -> dict[str, bytes]:
    return {f"/{NAME}/resolve/{revision}/{file}": body for file, body in files.items()}


def released_entry(files: dict[str, bytes]) -> dict:
    """configs/real.yaml's SmolLM2 entry with the tiny checkpoint's values in its keys (name, revision, files)."""
    real = yaml.safe_load((REPO / "configs/real.yaml").read_text())["models"]["smollm2"]
    assert set(real) == {"source", "name", "revision", "files", "tokenizer"}
    return {**real, "name": NAME, "revision": REVISION, "files": {f: sha(b) for f, b in files.items()}}


def released_config(entry: dict) -> dict:
    config = tiny_config()
    config["models"]["released"] = {**entry, "tokenizer": "released"}
    config["tokenizers"]["released"] = {"source": "model", "model": "released"}
    config["experiments"]["zero"] = {"models": ["released"], "eval_sets": ["syn-test"], "objectives": ["untrained"]}
    return config


def online(endpoint: str, cache: Path) -> dict[str, str]:
    """The jobs' environment with the hub at `endpoint`, an empty hub cache, and the offline switches off: this
    module's jobs reach a hub, the loopback one (each job runs in its own process, not the session's warm server,
    whose environment has no HF_ENDPOINT)."""
    env = {k: v for k, v in SESSION_ENV.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    return job_environment({**env, "HF_ENDPOINT": endpoint, "HF_HUB_CACHE": str(cache)})


def test_the_fetch_job_takes_the_pinned_revision_checks_each_file_and_the_model_loads(tmp_path, checkpoint):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    newer = {**checkpoint, "model.safetensors": checkpoint["model.safetensors"][:-8] + b"\0" * 8}
    write_config(tmp_path, released_config(released_entry(checkpoint)))
    with serve({**hub_paths(checkpoint), **hub_paths(newer, "main")}) as server:
        result = subprocess.run(
            snakemake_command(tmp_path, targets=[RELEASED], configfiles=[tmp_path / "config.yaml"], cores=1),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=online(server.url("").rstrip("/"), tmp_path / "hf-cache"),
        )
        server.settle()
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert sorted(r["path"] for r in server.requests) == sorted(hub_paths(checkpoint))  # that revision, each file once
    folder = tmp_path / RELEASED
    assert {f: (folder / f).read_bytes() for f in checkpoint} == checkpoint
    record = json.loads((folder / "hub.json").read_text())
    assert (record["name"], record["revision"]) == (NAME, REVISION)
    assert {f: e["sha256"] for f, e in record["files"].items()} == {f: sha(b) for f, b in checkpoint.items()}
    written = sorted(p.name for p in folder.iterdir() if p.name != ".snakemake_timestamp")
    assert written == sorted([*checkpoint, "hub.json"])
    assert not (tmp_path / f"{RELEASED}.parts").exists()
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model).__name__ == "LlamaForCausalLM" and len(AutoTokenizer.from_pretrained(folder)) > 0


def fetch_job(workdir, hub: dict, env: dict) -> subprocess.CompletedProcess:
    """The fetch_model job's command (rules/data.smk) on `hub`, in `workdir`."""
    return subprocess.run(
        [sys.executable, "-m", "workflow_lib.data.hub_files", "--key", "released", "--hub", json.dumps(hub)]
        + ["--output", RELEASED],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=workdir,
        env=env,
    )


def test_a_wrong_sha256_fails_the_job_naming_the_key_and_the_file_and_keeps_nothing(tmp_path, checkpoint):
    entry = released_entry(checkpoint)
    hub = {"name": NAME, "revision": REVISION, "files": {**entry["files"], "model.safetensors": "0" * 64}}
    with serve(hub_paths(checkpoint)) as server:
        result = fetch_job(tmp_path, hub, online(server.url("").rstrip("/"), tmp_path / "hf-cache"))
    assert result.returncode == 1
    assert "models.released.files.model.safetensors: sha256 mismatch" in result.stderr, result.stderr[-2000:]
    assert f"/{NAME}/resolve/{REVISION}/model.safetensors" in result.stderr
    assert not (tmp_path / RELEASED).exists()
    assert not (tmp_path / f"{RELEASED}.parts" / "model.safetensors").exists()


def test_offline_the_job_says_so_naming_the_key(tmp_path, checkpoint):
    hub = {"name": NAME, "revision": REVISION, "files": {"config.json": sha(checkpoint["config.json"])}}
    env = {**online("http://127.0.0.1:9", tmp_path / "hf-cache"), "HF_HUB_OFFLINE": "1"}
    result = fetch_job(tmp_path, hub, env)
    assert result.returncode == 1 and "models.released.files.config.json: HF_HUB_OFFLINE is set" in result.stderr
    assert not (tmp_path / RELEASED).exists()


def test_the_pinned_folder_becomes_the_models_name_and_what_loads_it_waits_for_it(tmp_path):
    entry = {"source": "hf", "name": NAME, "revision": REVISION, "files": {"config.json": "a" * 64}}
    config = validate_config(released_config(entry), workdir=tmp_path)
    model = config["models"]["released"]
    assert model["name"] == PRETRAINED_DIR.format(model="released") == RELEASED and "revision" not in model
    assert model["hub"] == {"name": NAME, "revision": REVISION, "files": {"config.json": "a" * 64}}
    assert config["tokenizers"]["released"]["name"] == RELEASED
    inputs = Inputs(config, tmp_path)
    assert inputs.pretrained("released") == {"pretrained": RELEASED}
    again = copy.deepcopy(config)
    normalise_gguf(again, tmp_path)
    assert again["models"]["released"] == model  # idempotent


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"revision": None}, r"models\.released\.revision: pinned files are downloaded at one revision"),
        ({"name": "./here"}, r"models\.released\.files: .* must be a hub id"),
        ({"gguf": {"url": "https://x/y.gguf", "sha256": "b" * 64}, "name": None}, r"models\.released\.files: .*GGUF"),
        ({"files": {"config.json": "not-a-sha"}}, r"models\.released\.files\.config\.json"),
        ({"files": {"../up.json": "a" * 64}}, r"models\.released\.files"),
        ({"name": None, "files": None}, r"models\.released: needs 'name' or 'gguf'; its name is null"),
    ],
)
def test_a_model_that_cannot_be_downloaded_so_is_refused_naming_its_key(tmp_path, change, message):
    (tmp_path / "here").mkdir()
    entry = {"source": "hf", "name": NAME, "revision": REVISION, "files": {"config.json": "a" * 64}, **change}
    with pytest.raises(ConfigError, match=message):
        validate_config(released_config(entry), workdir=tmp_path)
