"""Shared fixtures: no test may touch the network, and workflow tests run snakemake in a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread; on a busy machine, more threads wait on each other (10x slower)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
