"""`make e2e`, security (issue 13 item 2): a branch rewrites train.yml to dump its environment and secrets.

The story's train.yml gets a job of the branch's own (`dump`, on a GitHub-hosted runner, `id-token: write`) and a
first step in the train job (code on the GPU runner) that print every variable, `toJSON(secrets)` and
`toJSON(vars)`, base64-encoded as an attacker would to get past GitHub's log masking. Start and stop still run
the platform's gpu-runner-start/stop.yml at the pinned commit (act serves the platform's tree). The runner
credential lives only in SSM and the launch role's AWS credentials only in the start and stop jobs, so a scan of
everything the story left behind must find neither, while it does find what a branch may read: the workflow's
GITHUB_TOKEN and the MLflow repository secrets (the control that the dump worked).

What this story cannot show offline: that the branch's own job cannot assume the launch role (act has no OIDC
token; the trust policy's `sub` table in the template's platform/tests/runner/test_role_trust.py proves it), and that the instance role cannot
decrypt the credential (moto enforces no IAM; platform/tests/runner/test_key_policies.py proves it). The dump
leaves out the harness's DOUBLE_* variables: act hands its `--env` to every job, and they are the test's
stand-ins for GitHub's OIDC exchange, which a real branch job does not have.
"""

from __future__ import annotations

import string

import pytest

from gpu_runner_testing.story.leak_scan import jit_config_secrets, needles, random_key, scan_tree
from gpu_runner_testing.story.stories import FAST_TRAIN, Scenario, Stack, run_story

pytestmark = pytest.mark.e2e
RUN_ID = "7373"
ALNUM = string.ascii_letters + string.digits

# The attacker's dump, one base64 line each (GitHub masks a registered value only where it appears literally).
DUMP = """\
          env | grep -v '^DOUBLE_' | base64 -w0; echo
          printf '%s' "${SECRETS}" | base64 -w0; echo
          printf '%s' "${VARS}" | base64 -w0; echo"""
DUMP_ENV = """\
        env:
          SECRETS: ${{ toJSON(secrets) }}
          VARS: ${{ toJSON(vars) }}"""


def dump_everything(workflow: str) -> str:
    """train.yml as a branch would rewrite it: a dump as the train job's first step, and a job of its own."""
    train_steps = "\n  train:\n"
    at = workflow.index("    steps:\n", workflow.index(train_steps)) + len("    steps:\n")
    step = f"      - name: Dump the environment (attacker)\n{DUMP_ENV}\n        run: |\n{DUMP}\n"
    job = (
        "\n  dump:\n    runs-on: ubuntu-latest\n    permissions:\n      contents: read\n      id-token: write\n"
        f"    steps:\n      - name: Dump the environment (attacker)\n{DUMP_ENV}\n        run: |\n{DUMP}\n"
    )
    return workflow[:at] + step + workflow[at:].rstrip("\n") + "\n" + job


def test_a_branch_that_dumps_its_environment_finds_no_runner_or_launch_credential(
    stack: Stack, tmp_path
) -> None:
    runner_credential = random_key("github_pat_runner_", 40, ALNUM)
    workflow_token = random_key("ghs_workflow_", 36, ALNUM)
    launch_key = (
        random_key("AKIALAUNCH", 10, string.ascii_uppercase + string.digits),
        random_key("", 40, ALNUM),
    )
    mlflow_password = random_key("mlflow-", 24, ALNUM)
    scenario = Scenario(
        91, "a branch rewrites train.yml to dump env and secrets", "no runner or launch credential in any log",
        train=FAST_TRAIN, workflow_edit=dump_everything, github_token=workflow_token,
        runner_credential=runner_credential, launch_credentials=launch_key,
        secrets={"MLFLOW_TRACKING_USERNAME": "e2e-mlflow-user", "MLFLOW_TRACKING_PASSWORD": mlflow_password},
    )  # fmt: skip
    story = run_story(stack, scenario, tmp_path, RUN_ID)
    assert story.run is not None and story.github is not None and story.simulator is not None
    context = f"act log: {story.run.log}\n{story.row()}"
    assert story.run.lifecycle_results == {
        "start": "success",
        "train": "success",
        "stop": "success",
        "dump": "success",
    }, context
    assert not story.simulator.errors, story.simulator.errors
    (jit_name, jit_config), *more = story.github.issued_jit_configs.items()
    assert not more, story.github.issued_jit_configs

    protected = {
        "runner credential in SSM": runner_credential,
        "launch role access key id": launch_key[0],
        "launch role secret key": launch_key[1],
        **{f"installation token {i}": t for i, t in enumerate(story.github.installation_tokens)},
        **jit_config_secrets(jit_name, jit_config),
    }
    readable = {"GITHUB_TOKEN": workflow_token, "MLflow password": mlflow_password}
    # A hit is named "<name>" or "<name> (<encoding>)": no name may hold " (" itself.
    assert not [n for n in [*protected, *readable] if " (" in n]
    hits = set(scan_tree(story.scratch, needles({**protected, **readable})))
    found = {name.split(" (")[0] for _where, name in hits}
    # The control: the dump ran in both places and the scanner sees through its encoding.
    dumped = {(where, name) for where, name in hits if name.endswith("(base64)")}
    assert {n.split(" (")[0] for _w, n in dumped} >= set(readable), sorted(hits)
    # The launch role's keys did pass through the start and stop jobs (the raw log, masked commands included,
    # holds them), and reached no log view.
    raw = {name for _where, name in scan_tree(story.scratch, needles(protected), view=lambda _p, data: data)}
    assert {"launch role access key id", "launch role secret key"} <= raw, raw
    # The runner was registered with the credential from SSM, never with the workflow's token.
    runner_calls = [r for r in story.github.requests if "/actions/runners" in r.path]
    assert [(r.path.rsplit("/", 1)[1], r.status) for r in runner_calls if r.method == "POST"] == [
        ("generate-jitconfig", 201)
    ], runner_calls
    assert {r.credential for r in runner_calls} == {runner_credential}, runner_calls
    assert found & set(protected) == set(), sorted(h for h in hits if h[1].split(" (")[0] in protected)
    assert (story.instances_left, story.runners_left, story.params_left) == (0, 0, 0), context
