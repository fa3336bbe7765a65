"""Warm job processes: one preloaded Python forks the `python -m workflow_lib.<stage>` jobs of a CPU run (test and
rehearsal infrastructure: it lives outside the workflow's package, so it is in no job's code digest).

Why: on stand-in models a job's own work takes well under a second, but importing torch and transformers takes
about 5 s of it (docs/benchmarks.md, "Test suite time"), so `make rehearsal` spends most of its time importing the same
modules 447 times. `serve` imports them once; for each job it forks a child that runs the job's module as
`__main__` with the job's arguments, working directory, environment and standard streams. The job's own process
(the client: `handoff`, which studies/warm_hook/sitecustomize.py calls at Python's start-up, before anything is
imported, in an environment that `hooked` put that folder on PYTHONPATH for) waits for the
child, forwards SIGTERM, SIGINT and SIGHUP to it, and exits with its status.

It only ever saves time. A job runs cold, exactly as without it, whenever PERTURBED_LM_WARM is unset, its socket
does not answer, the job was not started as `python -m workflow_lib.<module> ...`, or the job's environment
differs from the server's in a variable that a preloaded library may read at import (HF_HUB_OFFLINE, the thread
counts Snakemake sets, the ranks of a distributed launch: any but those in FREE). Outputs are the same bytes warm or cold
(tests/studies/test_warm.py). `make rehearsal`, `make real` (and its variants) and the workflow tests' snakemake helper
(tests/support/workflow_runs.py) start a server, and so does `make run` (studies/default.py); cluster jobs run cold. A warm job's `benchmark:` file measures the client: its wall time holds, its memory
columns do not.

    python -m studies.warm --socket /tmp/x/warm.sock [--preload MODULE ...]
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
from pathlib import Path

ENV = "PERTURBED_LM_WARM"  # the server's socket path, in a job's environment
# Snakemake gives every job these, set to its threads (snakemake/shell.py); numpy's OpenBLAS reads them at import, so a
# server started with them at 1 (`environment`) serves the jobs of one thread, and the others run cold.
THREADS = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
# The variables that may differ between the server and a job: nothing the server imports reads them at import
# (the temporary folder is looked up again in the job; polars, which reads _RJEM_MALLOC_CONF, is not preloaded).
FREE = frozenset(
    {
        ENV,
        "PATH",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "TMPDIR",
        "TMP",
        "TEMP",
        "TEMPDIR",
        "_RJEM_MALLOC_CONF",
        "PERTURBED_LM_TRACKING",
        # workflow_lib.install_source's SOURCE and EDITABLE, for the conda environments' post-deploy scripts (no job
        # reads them). Spelled here: the server must not import workflow_lib, or its jobs would all get the package
        # it found, not the one their PYTHONPATH names (a copy of the workflow's). tests/studies/test_warm.py checks.
        "PERTURBED_LM_SOURCE",
        "PERTURBED_LM_EDITABLE",
        "PS1",  # a shell's prompt: an activated venv exports it, and the jobs' bash may set it again
    }
)
# Imported once by the server: torch, transformers and the rehearsal's model families, which start no thread (with
# OMP_NUM_THREADS=1), and pyarrow and pandas, whose only thread is the bundled jemalloc's background thread, which
# ARROW_ALLOCATOR turns off (pyarrow's array conversions import pandas, 0.85 s of a job that never uses it). Not polars
# (its thread pool starts at import) or scipy: a process with threads must not fork.
HEAVY = (
    "torch",
    "pyarrow",
    "pyarrow.parquet",
    "pandas",
    "accelerate",
    "tokenizers",
    "safetensors.torch",
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.bert.modeling_bert",  # MiniLM, the default featuriser
    "transformers.models.opt.modeling_opt",
    "transformers.models.gpt_neo.modeling_gpt_neo",
    "transformers.models.llama.modeling_llama",
)
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


# ---------------------------------------------------------------------------------------------------- the client


HOOK = Path(__file__).resolve().parent / "warm_hook"  # its sitecustomize.py hands jobs over


# pyarrow's bundled jemalloc starts a background thread at import unless told not to; allocation only, no result
# changes (a job run cold keeps the thread and writes the same bytes).
ARROW_ALLOCATOR = {"JE_ARROW_MALLOC_CONF": "background_thread:false"}


def hooked(env: dict) -> dict:
    """`env` with the start-up hook's folder first on PYTHONPATH and ARROW_ALLOCATOR: what the server and its jobs both
    run with."""
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(HOOK)]
    return {**env, **ARROW_ALLOCATOR, "PYTHONPATH": os.pathsep.join([str(HOOK), *paths])}


def environment(env: dict) -> dict:
    """`env` as a server for the jobs of one thread must be started with."""
    return {**hooked(env), **dict.fromkeys(THREADS, "1")}


def job_module(argv: list[str]) -> str | None:
    """The module of `python -m workflow_lib.<module> ...`, else None (any other form runs cold)."""
    if len(argv) >= 3 and argv[1] == "-m" and argv[2].startswith("workflow_lib."):
        return argv[2]
    return None


def handoff() -> None:
    """Run this process's job in the warm server and exit with its status; return at once to run it cold."""
    path, argv = os.environ.get(ENV), getattr(sys, "orig_argv", [])
    module = job_module(argv)
    if path and module:
        request(path, module, argv[3:])


def request(path: str, module: str, args: list[str]) -> None:
    """Send one job to the server at `path`; exit with the job's status, or return if the server cannot take it."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        body = json.dumps({"module": module, "args": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [0, 1, 2])
        reply = conn.makefile("r")
        first = reply.readline().split()
    except OSError:
        conn.close()
        return
    if first[:1] != ["pid"]:  # refused: run cold
        conn.close()
        return
    pid = int(first[1])
    for number in FORWARDED:
        signal.signal(number, lambda received, frame: os.kill(pid, received))
    last = reply.readline().split()
    if last[:1] != ["exit"]:
        sys.stderr.write(f"studies.warm: the server lost job {pid} ({module})\n")
        sys.stderr.flush()
        os._exit(1)
    code = int(last[1])
    if code < 0:  # killed by a signal: die by the same one, as the job's own process would have
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


# ---------------------------------------------------------------------------------------------------- the server


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if len(data) < 4:
        raise OSError("short request")
    size = struct.unpack("!I", data[:4])[0]
    body = data[4:]
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise OSError("short request")
        body += chunk
    return json.loads(body), fds


def refusal(server_env: dict, job_env: dict) -> list[str]:
    """The variables, besides FREE ones, whose values differ between the server and the job (none: serve it)."""
    return sorted(k for k in set(server_env) | set(job_env) if k not in FREE and server_env.get(k) != job_env.get(k))


def _run_job(job: dict, fds: list[int]) -> int:
    """In the forked child: become the job's process, run its module as __main__, return its exit status."""
    import runpy
    import tempfile
    import traceback

    for number in (*FORWARDED, signal.SIGCHLD):  # the server's handlers are not the job's
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        if fd > 2:
            os.close(fd)
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    sys.path[0] = job["cwd"]  # as `python -m` puts the working directory first
    tempfile.tempdir = None  # looked up again, in the job's TMPDIR
    sys.argv = [job["module"], *job["args"]]
    try:
        runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what Python prints for an uncaught exception, and its status
        traceback.print_exc()
        code = 1
    return code


def serve(path: str, preload: list[str]) -> None:
    import atexit
    import importlib
    import select

    server_env = dict(os.environ)  # as the server was started: what a job's environment must match
    for name in preload:
        importlib.import_module(name)
    # What the imports set in the environment (torch: TORCHINDUCTOR_CACHE_DIR), as they would in a cold job.
    imported_env = {k: v for k, v in os.environ.items() if server_env.get(k) != v}
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
    if threads != 1:  # forking a process with other threads can deadlock the child
        sys.exit(f"studies.warm: {threads} threads after preloading; serving nothing")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    log = sys.stderr
    print(f"studies.warm: serving on {path} ({len(preload)} modules preloaded)", file=log, flush=True)
    running: dict[int, tuple[socket.socket, str]] = {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        ready, _, _ = select.select([listener], [], [], 0.02)
        while running:  # reap finished jobs and tell their clients
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn, module = running.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            print(f"studies.warm: ran {module} (pid {pid}, status {code})", file=log, flush=True)
            try:
                conn.sendall(f"exit {code}\n".encode())
            except OSError:
                pass
            conn.close()
        if not ready:
            continue
        conn, _ = listener.accept()
        try:
            job, fds = _receive(conn)
        except (OSError, ValueError):
            conn.close()
            continue
        differ = refusal(server_env, job["env"])
        if differ:
            print(
                f"studies.warm: {job['module']} runs cold: its environment differs in {', '.join(differ)}",
                file=log,
                flush=True,
            )
            conn.sendall(b"refused\n")
            conn.close()
            for fd in fds:
                os.close(fd)
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close()
            for other, _ in running.values():
                other.close()
            conn.close()
            code = _run_job({**job, "env": {**job["env"], **imported_env}}, fds)
            try:
                sys.stdout.flush()
                sys.stderr.flush()
                atexit._run_exitfuncs()  # what a job's own process runs at exit (loggers, trackers)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        running[pid] = (conn, job["module"])
        print(f"studies.warm: started {job['module']} (pid {pid})", file=log, flush=True)
        try:
            conn.sendall(f"pid {pid}\n".encode())
        except OSError:  # the client is gone; the job still runs, and is reaped above
            pass


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m studies.warm", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="the Unix socket to listen on (PERTURBED_LM_WARM of jobs)")
    parser.add_argument(
        "--preload",
        nargs="*",
        default=list(HEAVY),
        help="modules to import once (default: torch, transformers and the model families of the rehearsal)",
    )
    args = parser.parse_args()
    serve(args.socket, args.preload)


if __name__ == "__main__":
    main()
