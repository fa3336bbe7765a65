"""`make design`: the design calculator (workflow_lib.report.design) on the finished real study, `make real`'s
results/real/ (or `--ci`: `make real-ci`'s results/real-ci/, `--full`: `make real-full`'s, `--mauve`: MAUVE's pilot,
`make real-mauve`'s results/real-mauve/). Other arguments (--effect,
--device, --family, --tests) reach the calculator; another pilot study is sized with
`python -m workflow_lib.report.design --configfile <its files> --results <its results folder>`."""

from __future__ import annotations

import argparse

from studies.real import REPO, WORKDIRS, study_configs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--ci", action="store_true", help="the CI-sized real study (results/real-ci/)")
    size.add_argument("--full", action="store_true", help="the full-size real study (results/real-full/)")
    size.add_argument("--mauve", action="store_true", help="MAUVE's pilot, make real-mauve (results/real-mauve/)")
    args, rest = parser.parse_known_args(argv)
    name = next((size for size in ("ci", "full", "mauve") if getattr(args, size)), "cpu")
    workdir = REPO / WORKDIRS[name]
    from workflow_lib.report.design import main as design

    configs = [str(p) for p in study_configs(name)]
    design(["--configfile", *configs, "--results", str(workdir / "results"), *rest])


if __name__ == "__main__":
    main()
