"""The workflow's code: one subpackage per stage, each job a `python -m workflow_lib.<stage>.<module>` command."""

import os as _os

if _os.environ.get("PERTURBED_LM_WARM"):  # a warm server runs this job (workflow_lib/warm.py), else it runs here
    from workflow_lib.warm import handoff as _handoff

    _handoff()
