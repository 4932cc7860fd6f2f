"""The story under act: a generated project's own workflows (train.yml, sweep.yml, predict.yml, batch.yml's callers)
run end to end with `act` against the platform's doubles, as `make story` and `make e2e` run them in the project.

- `project`: which project the story runs (the one pytest runs in);
- `harness`: act, the repository a push is made in, the workflows in host mode, the local action doubles
  (`actions/<name>/action.yml`, swapped in for the remote actions with act's `--local-repository`);
- `stories`: the stack every story shares, a scenario, its run and what it left;
- `sweep_story`, `batch_story`: what the sweep and Batch stories add;
- `leak_scan`: every form a secret can take in what a story leaves behind;
- `report`: the e2e report the stories write and `make demo` reads;
- `fixtures`: the stack fixtures and the order of `make e2e`, a pytest plugin the project's conftest loads;
- `platform_stories`: the platform's own stories (faults, security, the MLflow server, the cost report), which
  `make e2e` collects from here and tells through the project's workflows.

The project keeps its own stories (tests/e2e/test_*.py: what its workflows must do); the machinery is the
platform's, at the commit the project pins.
"""

from pathlib import Path

# The local composite doubles of the remote actions the workflows use (checkout, setup-uv, configure-aws-credentials,
# upload-artifact): each may declare only inputs and outputs its real action has (the project's
# tests/test_action_contracts.py holds them to the contracts of its pins).
ACTION_DOUBLES = Path(__file__).resolve().parent / "actions"
