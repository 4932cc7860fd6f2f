"""The workflow checks: GitHub's files read as GitHub reads them, the rules no linter enforces, the linters run
offline, the `run:` scripts run with hostile values, the gpu-runner CLI contract the workflows are written against,
and the pinned actions' contracts (action_contracts.json).

One copy, used twice: by a project's tests/workflows/ on its own workflows, and by the template repository's tests
on the platform's reusable workflows and composite actions.
"""
