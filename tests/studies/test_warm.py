"""studies.warm: a job handed to the warm server runs as it would in its own process (its arguments, working
directory, streams, exit status, signals, and the same output bytes), and any job it cannot take runs cold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from studies.warm import ENV, environment, job_module, refusal

TEXTS = [
    f"the {a} {v} the {b} near the river"
    for a in ("cat", "dog", "fox")
    for v in ("saw", "met")
    for b in ("goat", "duck")
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(socket, log, environment of the server): a server with torch and transformers preloaded, as the rehearsal's."""
    from support.workflow_runs import job_environment, warm_server

    log = tmp_path_factory.mktemp("warm") / "server.log"
    env = environment(job_environment(dict(os.environ)))  # the checkout on PYTHONPATH, as the Snakefile gives jobs
    with warm_server(env, log) as jobs:
        assert ENV in jobs, log.read_text()
        yield Path(jobs[ENV]), log, env


def job(server, *args: str, cwd: Path, warm: bool = True, **env: str) -> subprocess.CompletedProcess:
    path, _, server_env = server
    environment = {**server_env, **({ENV: str(path)} if warm else {}), **env}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=300
    )


def served(server) -> list[str]:
    return [line for line in server[1].read_text().splitlines() if " ran " in line or "runs cold" in line]


def test_the_post_deploy_variables_keep_a_job_warm_and_the_server_imports_no_workflow_lib():
    """The workflow exports where its package came from (workflow_lib.install_source) for the conda environments'
    scripts: a job whose environment has them is served. The server imports no workflow_lib module, else every job
    would get the package it found first, not the one its PYTHONPATH names (a copy of the workflow)."""
    from workflow_lib.install_source import deploy_environment

    assert refusal({"A": "1"}, {"A": "1", **deploy_environment()}) == []
    code = "import sys, studies.warm; print(sorted(m for m in sys.modules if m.startswith('workflow_lib')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_only_python_dash_m_of_a_workflow_module_is_handed_over():
    assert job_module(["python", "-m", "workflow_lib.sample.sampler", "--model", "m"]) == "workflow_lib.sample.sampler"
    assert job_module(["python", "-u", "-m", "workflow_lib.sample.sampler"]) is None  # any other form runs cold
    assert job_module(["python", "-m", "studies.warm", "--socket", "s"]) is None
    assert job_module(["python", "-m", "pytest"]) is None and job_module(["python", "run.py"]) is None
    assert refusal({"A": "1", "PATH": "/a", ENV: "s"}, {"A": "1", "PATH": "/b"}) == []
    assert refusal({"A": "1", "HF_HUB_OFFLINE": "1"}, {"A": "2"}) == ["A", "HF_HUB_OFFLINE"]
    assert refusal({"PS1": "$ "}, {"PS1": "(.venv) $ "}) == []  # an activated venv's prompt keeps jobs warm


def test_a_sample_job_writes_the_same_bytes_warm_and_cold_in_a_fraction_of_the_time(server, tmp_path):
    from studies.families import make_checkpoint

    model = make_checkpoint(tmp_path / "hub", "gpt2", TEXTS)
    pq.write_table(
        pa.table({"prompt_id": pa.array([3, 5, 8], pa.int64()), "prefix": ["the cat", "the dog saw", "a"]}),
        tmp_path / "prompts.parquet",
    )
    settings = {"batch_size": 4, "gpus": 1, "mode": "exact", "new_tokens": 6, "precision": "fp32", "runs": 2, "seed": 7}
    args = [
        "workflow_lib.sample.sampler",
        "--model",
        str(model),
        "--prompts",
        "prompts.parquet",
        "--perturbation",
        json.dumps({"intensity": 0.0, "strategy": "insertion"}),
        "--settings",
        json.dumps(settings),
    ]
    seconds = {}
    for mode in ("cold", "warm"):
        start = time.monotonic()
        done = job(server, *args, "--output", f"{mode}.parquet", cwd=tmp_path, warm=mode == "warm")
        seconds[mode] = time.monotonic() - start
        assert done.returncode == 0, done.stderr[-2000:]
        assert "6 continuations of 6 tokens" in done.stderr  # the job's log, through the streams it was given
    assert (tmp_path / "warm.parquet").read_bytes() == (tmp_path / "cold.parquet").read_bytes()
    assert served(server)[-1].startswith("studies.warm: ran workflow_lib.sample.sampler")
    assert seconds["warm"] < seconds["cold"] / 2, seconds


def test_a_failing_job_keeps_its_status_and_its_one_line_message(server, tmp_path):
    done = job(
        server,
        "workflow_lib.data.gguf",
        "--key",
        "smol",
        "--source",
        "{}",
        "--gguf",
        "absent.gguf",
        "--output",
        "out",
        cwd=tmp_path,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "models.smol.gguf" in last and "no such file" in last, done.stderr
    assert "ran workflow_lib.data.gguf" in served(server)[-1] and served(server)[-1].endswith("status 1)")
    assert not (tmp_path / "out").exists()


def test_a_job_the_server_cannot_take_runs_cold(server, tmp_path):
    before = len(served(server))
    done = job(server, "studies.warm", "--help", cwd=tmp_path)  # the server's own module: never handed over
    assert done.returncode == 0 and "--socket" in done.stdout
    other = job(server, "workflow_lib.cost.estimate", "--help", cwd=tmp_path, HF_HUB_OFFLINE="0")
    assert other.returncode == 0 and "--configfile" in other.stdout
    assert served(server)[before:] == [
        "studies.warm: workflow_lib.cost.estimate runs cold: its environment differs in HF_HUB_OFFLINE"
    ]
    absent = job(server, "workflow_lib.cost.estimate", "--help", cwd=tmp_path, **{ENV: str(tmp_path / "none.sock")})
    assert absent.returncode == 0 and "--configfile" in absent.stdout and len(served(server)) == before + 1
    warm = job(server, "workflow_lib.cost.estimate", "--help", cwd=tmp_path)
    assert warm.returncode == 0 and "--configfile" in warm.stdout  # its stdout, through the client's
    assert served(server)[-1].startswith("studies.warm: ran workflow_lib.cost.estimate")


def test_a_signal_to_the_jobs_process_ends_the_warm_job_with_it(server, tmp_path):
    """Snakemake stops a job by signalling its process: the client passes the signal on and dies by it."""
    path, log, env = server
    code = f"from studies.warm import request; request({str(path)!r}, 'http.server', ['0', '--bind', '127.0.0.1'])"
    client = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**env, ENV: str(path)},
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline, started = time.monotonic() + 60, []
    while not started and time.monotonic() < deadline:
        started = [line for line in log.read_text().splitlines() if "started http.server" in line]
        time.sleep(0.1)
    pid = int(started[-1].split("pid ")[1].rstrip(")"))
    time.sleep(0.5)
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == -signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        for _ in range(100):  # reaped by the server within its next rounds
            os.kill(pid, 0)
            time.sleep(0.05)
    assert served(server)[-1] == f"studies.warm: ran http.server (pid {pid}, status -{int(signal.SIGTERM)})"
