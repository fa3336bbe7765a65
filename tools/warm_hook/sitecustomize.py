"""Python imports `sitecustomize` at every start-up; this one is found only where this folder is on PYTHONPATH, which
the warm server's environment alone puts there (tools/warm.py: `hooked`). It hands a `python -m workflow_lib...` job
to the server whose socket PERTURBED_LM_WARM names, and does nothing otherwise: the workflow's package knows nothing
of it, so no job's code digest holds test infrastructure."""

import os

if os.environ.get("PERTURBED_LM_WARM"):
    from tools.warm import handoff

    handoff()
