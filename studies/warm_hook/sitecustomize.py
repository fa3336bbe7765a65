"""Python imports `sitecustomize` at every start-up; this one is found only where this folder is on PYTHONPATH, which
the warm server's environment alone puts there (studies/warm.py: `hooked`). It hands a `python -m workflow_lib...` job
to the server whose socket PERTURBED_LM_WARM names, and does nothing otherwise: the workflow's package knows nothing
of it, so no job's code digest holds test infrastructure. studies/warm.py is loaded from its file (standard library
only), so the job's sys.path is left as it was, whatever its working directory."""

import os

if os.environ.get("PERTURBED_LM_WARM"):
    import importlib.util
    from pathlib import Path

    _spec = importlib.util.spec_from_file_location(
        "_perturbed_lm_warm", Path(__file__).resolve().parent.parent / "warm.py"
    )
    assert _spec is not None and _spec.loader is not None  # a file that exists beside this folder
    _warm = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_warm)
    _warm.handoff()
