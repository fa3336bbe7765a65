"""The files that let others reuse and cite the project: LICENSE, CITATION.cff and the README's citing section."""

from __future__ import annotations

import re
import tomllib

import yaml
from support.study import REPO

PAPER = "Perturbation is All You Need for Extrapolating Language Models"


def test_license_is_mit_and_citation_names_the_software_and_the_seed_paper():
    assert (REPO / "LICENSE").read_text().startswith("MIT License")
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["license"] == "MIT"
    assert cff["message"] and cff["authors"] and cff["title"].startswith("perturbed-LM")
    assert cff["version"] == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    paper = cff["references"][0]
    assert paper["title"] == PAPER and paper["type"] == "article"
    assert [a["family-names"] for a in paper["authors"]] == ["Cen", "Zhu", "Shen", "Shi"]


def test_readme_ends_with_how_to_cite_both():
    readme = (REPO / "README.md").read_text()
    last = re.split(r"^## ", readme, flags=re.MULTILINE)[-1]
    assert last.startswith("License and citing")
    assert "CITATION.cff" in last and "LICENSE" in last and PAPER in last and "@software" in last
