"""`make check CONFIG="a.yaml b.yaml"`: a study's config files checked the way the Snakefile will check them, before
anything runs: each file's YAML (a syntax error named by file, line and column: config_files.read_yaml), then the
merged config against the schema and the workflow's own checks, and the cost model's (a sampling shard predicted
past cost.max_minutes), each error naming its key. Snakemake's own message for a broken `--configfile` names
neither the file nor the line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workflow_lib.config import ConfigError, validate_config
from workflow_lib.config_files import read_configs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a study's config files, checked as the Snakefile checks them")
    parser.add_argument("files", nargs="+", help="the study's config files, in the order snakemake gets them")
    args = parser.parse_args(argv)
    from workflow_lib.config_semantics import check_semantics
    from workflow_lib.cost.devices import check_cost
    from workflow_lib.cost.slurm import planned

    try:
        config = read_configs(args.files)
        validate_config(config, workdir=Path.cwd())
        check_semantics(config, Path.cwd())
        check_cost(config["cost"])
        planned(config)  # the cost model's checks (a sampling shard past cost.max_minutes)
    except ConfigError as error:
        print(f"Invalid configuration: {error}", file=sys.stderr)
        return 1
    print(f"{' + '.join(args.files)}: a valid study", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
