"""Where the running package was installed from, for the conda environments' post-deploy scripts (envs/*.sh).

Snakemake runs a post-deploy script from a copy of it (`.snakemake/conda/<hash>.post-deploy.sh`; for a module read
from GitHub, the copy of a temporary file), so the script's own path says nothing of the workflow's. The workflow
says it instead: rules/common.smk puts `deploy_environment()` into the environment that snakemake, and so each
script, runs in, and the script installs the same package into the new environment: a checkout (editable, so that
an edit reaches the jobs), the git URL and commit it was installed from, or the release by version. From the
distribution's PEP 610 record (direct_url.json). Standard library only. docs/usage.md, "Conda environments".
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

DISTRIBUTION = "perturbed-lm"
SOURCE, EDITABLE = "PERTURBED_LM_SOURCE", "PERTURBED_LM_EDITABLE"  # what the post-deploy scripts read


def source_of(direct_url: str | None, version: str) -> tuple[str, bool]:
    """(what pip installs, whether editable) from a distribution's direct_url.json text (None: installed from an
    index, by version)."""
    if direct_url is None:
        return f"{DISTRIBUTION}=={version}", False
    record = json.loads(direct_url)
    url = record["url"]
    if "dir_info" in record:  # a folder: a checkout, or a copy of one
        return unquote(urlparse(url).path), bool(record["dir_info"].get("editable"))
    if "vcs_info" in record:  # git+https://...@<the commit it was>, not the moving tag or branch
        vcs = record["vcs_info"]
        return f"{vcs['vcs']}+{url}@{vcs['commit_id']}", False
    return url, False  # an archive (a release's sdist or wheel by URL)


def package_source() -> tuple[str, bool]:
    """The running package's source: the checkout it runs from (a folder with its pyproject.toml, editable), or
    where pip installed it from (its distribution's record)."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():
        return str(checkout), True
    distribution = metadata.distribution(DISTRIBUTION)
    return source_of(distribution.read_text("direct_url.json"), distribution.version)


def deploy_environment() -> dict[str, str]:
    """The variables the post-deploy scripts read."""
    source, editable = package_source()
    return {SOURCE: source, EDITABLE: "1" if editable else "0"}
