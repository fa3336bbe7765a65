"""No shell sees config text (issue 64): names, paths and URLs holding spaces, `;`, `$()`, backticks and quotes
reach every planned command as single words, a hub name or revision with shell characters is refused before any
job, and a job given such a URL runs without running any of it."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from studies.httpserver import serve
from support.workflow_runs import snakemake, tiny_config, write_config

pytestmark = pytest.mark.workflow

# Each hostile value touches a sentinel in the job's working directory if a shell ever runs part of it.
SENTINEL = f"x-{uuid.uuid4().hex[:8]}"
HOSTILE = f"a b;touch {SENTINEL}-semi;$(touch {SENTINEL}-dollar)`touch {SENTINEL}-tick`'q\""
URL_PATH = "/files/" + quote(HOSTILE, safe="") + ".jsonl"
ROWS = "".join(json.dumps({"text": " ".join(f"w{i}x{j}" for j in range(130))}) + "\n" for i in range(12))


def web_dataset(url: str) -> dict:
    return {
        "source": "url",
        "format": "jsonl",
        "files": {"test": {"url": url, "sha256": hashlib.sha256(ROWS.encode()).hexdigest()}},
    }


def hostile_config(workdir: Path, url: str) -> tuple[dict, dict[str, str]]:
    """The tiny study plus an untrained local model in a folder named HOSTILE (its own tokenizer), synonyms from a
    file named HOSTILE, and an eval set fetched from a URL whose name decodes to HOSTILE; with the values a command
    may carry."""
    folder = workdir / "hub" / HOSTILE
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps(
            {"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 16, "n_positions": 128, "vocab_size": 300}
        )
    )
    pairs = workdir / f"{HOSTILE}.tsv"
    pairs.write_text("river\tstream\n")
    config = tiny_config()
    config["tokenizers"]["local"] = {"source": "hf", "name": str(folder)}
    config["models"]["local"] = {"source": "hf", "name": str(folder), "tokenizer": "local"}
    config["synonyms"] = {"file": str(pairs)}
    config["datasets"]["web"] = web_dataset(url)
    config["eval_sets"]["web"] = {"dataset": "web", "split": "test"}
    perturbation = {"intensities": [0, 0.2], "synonyms": ["file"]}
    config["experiments"]["zero"] = {
        "models": ["local"],
        "objectives": ["untrained"],
        "eval_sets": ["web", "syn-test"],
        "test_perturbation": perturbation,
    }
    return config, {"model": str(folder), "pairs": str(pairs), "url": url}


def words(command: str) -> list[str]:
    """The command as the shell splits it: `;`, `&`, `|`, `(`, `)`, `<`, `>` outside quotes are words of their own."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def planned_commands(output: str) -> list[str]:
    """The shell commands `snakemake -n -p` prints, one a job ("Shell command: ...")."""
    return re.findall(r"^Shell command: (.*)$", output, flags=re.MULTILINE)


def test_hostile_names_paths_and_urls_stay_single_words_in_every_planned_command(tmp_path):
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    config, values = hostile_config(workdir, "http://127.0.0.1:9" + URL_PATH)
    write_config(workdir, config)
    plan = snakemake(workdir, "-n", "-p")
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    commands = planned_commands(plan.stdout)
    assert len(commands) > 20, plan.stdout[-3000:]
    carried = dict.fromkeys(values, 0)
    for command in commands:
        argv = words(command)
        # Every word holding the sentinel is a whole hostile value: the model folder, the pairs file, or a JSON
        # setting that quotes it (the tokenizer's spec); an unquoted value would have been cut into several.
        for word in argv:
            if SENTINEL in word:
                whole = [v for value in values.values() for v in (value, json.dumps(value)[1:-1])]
                assert any(value in word for value in whole), (word, command)
        assert not {";", "(", ")", "&", "|"} & set(argv), command
        for name, value in values.items():
            carried[name] += argv.count(value)
    # --model of sample, perplexity and extrapolation; --pairs of synonyms; --url of fetch
    assert carried["model"] >= 3 and carried["pairs"] == 1 and carried["url"] == 1, carried
    fetch = next(c for c in commands if "workflow_lib.data.fetch download" in c)
    output = words(fetch)[words(fetch).index("--output") + 1]
    url = "http://127.0.0.1:9" + URL_PATH
    assert output == f"results/downloads/web/url-{hashlib.sha256(url.encode()).hexdigest()[:12]}.jsonl"


def test_a_hub_name_with_shell_characters_is_refused_before_any_job(tmp_path):
    config = tiny_config()
    config["tokenizers"]["hub"] = {"source": "hf", "name": "gpt2"}
    config["models"]["hub"] = {"source": "hf", "name": f"gpt2;touch${{IFS}}{SENTINEL};#", "tokenizer": "hub"}
    config["experiments"]["zero"] = {"models": ["hub"], "objectives": ["untrained"], "eval_sets": ["syn-test"]}
    write_config(tmp_path, config)
    run = snakemake(tmp_path)
    assert run.returncode != 0
    assert "Invalid configuration: config key models.hub.name:" in run.stderr, run.stderr[-3000:]
    assert not (tmp_path / "results").exists() and not list(tmp_path.glob(f"{SENTINEL}*"))


def test_a_url_whose_name_is_a_command_is_fetched_and_read_without_running_it(tmp_path):
    """The fetch and download jobs run on the URL: the file lands under its safe name, the provenance keeps the
    URL's own, and no part of the name ran."""
    with serve({URL_PATH: ROWS.encode()}) as server:
        url = server.url(URL_PATH)
        config = tiny_config()
        config["datasets"]["web"] = web_dataset(url)
        write_config(tmp_path, config)
        run = snakemake(tmp_path, "results/data/web/test.parquet")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    name = f"url-{hashlib.sha256(url.encode()).hexdigest()[:12]}.jsonl"
    assert (tmp_path / "results/downloads/web" / name).read_text() == ROWS
    (record,) = json.loads((tmp_path / "results/data/web/test.json").read_text())["provenance"]["files"]
    assert record["url"] == url and record["url_name"] == HOSTILE + ".jsonl"
    assert not list(tmp_path.rglob(f"{SENTINEL}*")) and not list(Path.cwd().glob(f"{SENTINEL}*"))


# The params that hold several words, each quoted where it is built (shell_words in rules/common.smk,
# Inputs.model_options and fetch_options, train/settings.py's launcher of fixed words); every other value is `:q`.
WORD_PARAMS = {
    "eval_sets",
    "file",
    "launch",
    "model",
    "options",
    "pairs",
    "prompts",
    "sha256",
    "synonyms",
    "tables",
    "tasks_folder",
    "tokens",
}
WORD_PARAMS |= {"other", "train_data", "validation"}


def test_every_value_a_rule_puts_into_its_command_is_quoted():
    from support.workflow_runs import REPO

    unquoted = []
    for path in sorted((REPO / "rules").glob("*.smk")):
        commands = re.findall(r"^\s+shell:\n\s+(\".*\")$", path.read_text(), flags=re.MULTILINE)
        for field in (f for command in commands for f in re.findall(r"\{([^{}]+)\}", command)):
            if not field.endswith(":q") and field.removeprefix("params.") not in WORD_PARAMS:
                unquoted.append(f"{path.name}: {{{field}}}")
    assert not unquoted, unquoted
