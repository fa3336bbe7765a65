"""The cost figures docs/cluster.md quotes are what `make estimate` prints today: the page's table is the command's
table, and each figure of its text is one the command's output gives (a change of the cost model that moves them
fails here until the page follows)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs/cluster.md"


def estimate(tmp_path: Path, *overlays: str, base: Path = REPO / "configs/paper.yaml") -> str:
    """`make estimate CONFIG=configs/paper.yaml ESTIMATE_ARGS="--device a100-80gb --gpus 8"`, with overlays (on
    `base`, the paper config unless told)."""
    files = []
    for i, overlay in enumerate(overlays):
        files.append(tmp_path / f"overlay{i}.yaml")
        files[-1].write_text(overlay)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "workflow_lib.cost.estimate",
            "--configfile",
            str(base),
            *map(str, files),
            "--device",
            "a100-80gb",
            "--gpus",
            "8",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def printed(tmp_path_factory) -> str:
    return estimate(tmp_path_factory.mktemp("estimate"))


def total(output: str) -> float:
    return float(re.search(r"GPU total: ([\d.]+) GPU-hours", output).group(1))


def test_the_pages_table_is_the_commands(printed):
    rows = [line for line in printed.splitlines() if line.startswith("|")]
    assert len(rows) == 8  # the header, its rule, the five GPU rules and evaluate, on the CPU
    page = PAGE.read_text()
    for row in rows:
        assert row in page, f"docs/cluster.md lacks the row the command prints: {row}"


def test_the_pages_figures_are_the_commands(printed, tmp_path):
    page = " ".join(PAGE.read_text().split())
    gpu_hours = total(printed)
    assert f"{gpu_hours:,.1f} GPU-hours in all" in page
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in printed.splitlines()
        if line.startswith("| ") and not line.startswith(("| rule", "| ---"))
    ]
    wall = sum(float(row[5].replace(",", "")) for row in rows if row[2] == "GPU")
    assert f"about {wall:.0f} hours of wall time on 8 GPUs" in page
    cpu_hours = float(re.search(r"CPU total: ([\d.]+) core-hours", printed).group(1))
    saved, idle, added = re.search(
        r"saved by the split: ([\d.]+)\..* idle for ([\d.]+) GPU-hours.* start-up adds ([\d.]+)\.", printed
    ).groups()
    assert f"and {cpu_hours:.1f} CPU core-hours" in page and f"which saves {saved} GPU-hours (the {idle} hours" in page
    assert f"less {added} of start-up" in page and f"of which the split saves {saved}" in page
    sample_share = next(float(row[6].rstrip("%")) for row in rows if row[0] == "sample")
    assert round(sample_share / 100, 1) == 0.9 and "Sampling is nine tenths of the study" in page
    # The longest job one evaluation's sampling would be in one job, and the shards sampling.shard_batches makes
    whole = estimate(tmp_path, "cost: {max_minutes: null}\nsampling: {shard_batches: null}\n")
    hours, job = re.search(r"Longest job: ([\d.]+) h \(sample (\S+)\)", whole).groups()
    assert f"would be predicted at up to {float(hours):.1f} hours: sampling GPT-Neo-1.3B on WritingPrompts" in page
    assert f"in one job an evaluation would take up to {float(hours):.1f}" in page
    assert all(part in job for part in ("gpt-neo-1.3b", "/brier/", "/writingprompts/", "insertion-0.025-exact"))
    assert f"{total(whole):,.1f} GPU-hours in one job per evaluation" in page and f"{gpu_hours:,.1f} in shards" in page
    pattern = r"Sampling: 200 evaluations in (\d+) shards \(sampling.shard_batches (\{.*\}): (\d+) to (\d+)"
    shards = re.search(pattern, printed).groups()
    assert (
        f"`sampling.shard_batches: {shards[1]}`): {shards[0]} shards for the 200 evaluations, up to {shards[3]}" in page
    )
    assert f"{shards[0]} shards ({shards[2]} to {shards[3]} for one)" in page
    longest = re.search(r"Longest job: ([\d.]+) h \(sample \S+\); its request \(([\d,]+) min\)", printed).groups()
    assert f"the longest shard is predicted at {longest[0]} h, a request of {longest[1]} minutes" in page
    assert f"is predicted at {longest[0]} hours; in one job" in page
    assert "Every job's static memory" in page and "every job's static memory fits" in printed.lower()
    bf16 = total(estimate(tmp_path, "sampling: {precision: bf16}\n"))
    assert f"predicts {bf16:,.1f} GPU-hours for the whole study instead of {gpu_hours:,.1f}" in page


def test_the_pages_cost_of_the_training_seeds_is_the_commands(printed, tmp_path):
    """The 3 training seeds of MLE without and with insertion (experiments `seeds` and `seeds-perturbed`): the study's
    GPU-hours with them and without them (the paper config less those two experiments: an overlay cannot drop one)."""
    paper = yaml.safe_load((REPO / "configs/paper.yaml").read_text())
    for name in ("seeds", "seeds-perturbed"):
        assert paper["experiments"][name]["seeds"] == [42, 43, 44], name
        del paper["experiments"][name]
    base = tmp_path / "paper-without-seeds.yaml"
    base.write_text(yaml.safe_dump(paper, sort_keys=False))
    with_seeds, without = total(printed), total(estimate(tmp_path, base=base))
    assert with_seeds > without
    page = " ".join(PAGE.read_text().split())
    assert "(experiments `seeds` and `seeds-perturbed`;" in page
    assert (
        f"cost {with_seeds - without:,.1f} GPU-hours: the study predicts {with_seeds:,.1f} GPU-hours with them and "
        f"{without:,.1f} without"
    ) in page
