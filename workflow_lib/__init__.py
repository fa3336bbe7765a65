"""The workflow's code: one subpackage per stage, each job a `python -m workflow_lib.<stage>.<module>` command."""
