"""Who may assume the stack's launch (train) and reaper roles: the OIDC trust of the deployed roles."""

from __future__ import annotations

from typing import Any

import pytest
from doubles.github_double import DEFAULT_REPOSITORY
from doubles.gpu_runner_stack import (
    _trust_subjects,
    role_of,
)
from doubles.iam_requests import (
    web_identity_allowed,
)
from doubles.stack_deploy import OIDC_URL

# Item 2 of issue 13: which OIDC tokens may assume the launch (train) and reaper roles. `sub` as GitHub writes it
# once bootstrap set the template repo, context, job_workflow_ref (GitHub docs "OpenID Connect reference" >
# "Customizing the subject claims", example "Requiring a reusable workflow and other claims", read 2026-12-01).
_O, _N = DEFAULT_REPOSITORY.split("/")
_WF = f"{_O}/{_N}/.github/workflows"
SUB_TABLE = [
    # (who, sub, may assume the launch role, may assume the reaper role)
    ("the default branch's start workflow, push to a train branch",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", True, False),
    ("the default branch's stop workflow, immutable ids",
     f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/train/a/b:job_workflow_ref:{_WF}/gpu-runner-stop.yml@refs/heads/main", True, False),
    ("a branch's own train.yml job (it rewrote the workflow)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/train.yml@refs/heads/train/demo", False, False),
    ("the branch's own copy of the reusable workflow (uses: ./...)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/train/demo", False, False),
    ("a pull request calling the default branch's workflow",
     f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("a branch outside the train prefix",
     f"repo:{_O}/{_N}:ref:refs/heads/feature:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("a job with an environment",
     f"repo:{_O}/{_N}:environment:prod:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("another repository's workflow of the same name",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:evil/{_N}/.github/workflows/gpu-runner-start.yml@refs/heads/main", False, False),
    ("a tag",
     f"repo:{_O}/{_N}:ref:refs/tags/v1:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("a recycled owner name (other ids)",
     f"repo:{_O}@9999/{_N}@2002:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("GitHub's default subject (template never set): any train branch's workflow",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo", False, False),
    ("the default branch's reap.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/reap.yml@refs/heads/main", False, True),
    ("a train branch's reap.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/reap.yml@refs/heads/train/demo", False, False),
    ("a dispatch of the default branch's train.yml on main (start workflow, main context)",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False),
    ("GitHub's default subject on the default branch",
     f"repo:{_O}/{_N}:ref:refs/heads/main", False, False),
]  # fmt: skip


def test_roles_trust_only_this_repository_in_both_subject_forms(stack: dict[str, Any]) -> None:
    session, outputs = stack["session"], stack["outputs"]
    owner, name = DEFAULT_REPOSITORY.split("/")
    provider, subjects = _trust_subjects(role_of(session, outputs["TrainRoleArn"]))
    assert provider == stack["oidc"]
    workflows = f"{owner}/{name}/.github/workflows"
    assert subjects == [
        f"repo:{owner}/{name}:ref:refs/heads/train/*:job_workflow_ref:{workflows}/gpu-runner-{job}.yml@refs/heads/main"
        for job in ("start", "stop")
    ] + [
        f"repo:{owner}@1001/{name}@2002:ref:refs/heads/train/*:job_workflow_ref:{workflows}/gpu-runner-{job}.yml"
        "@refs/heads/main"
        for job in ("start", "stop")
    ]
    provider, subjects = _trust_subjects(role_of(session, outputs["ReaperRoleArn"]))
    assert provider == stack["oidc"]
    assert subjects == [
        f"repo:{owner}/{name}:ref:refs/heads/main:job_workflow_ref:{workflows}/reap.yml@refs/heads/main",
        f"repo:{owner}@1001/{name}@2002:ref:refs/heads/main:job_workflow_ref:{workflows}/reap.yml@refs/heads/main",
    ]


@pytest.mark.parametrize(("who", "sub", "launch", "reap"), SUB_TABLE, ids=[row[0] for row in SUB_TABLE])
def test_only_the_default_branch_workflows_assume_the_roles(
    stack: dict[str, Any], who: str, sub: str, launch: bool, reap: bool
) -> None:
    session, outputs = stack["session"], stack["outputs"]
    claims = {f"{OIDC_URL}:aud": "sts.amazonaws.com", f"{OIDC_URL}:sub": sub}
    for output, expected in (("TrainRoleArn", launch), ("ReaperRoleArn", reap)):
        trust = role_of(session, outputs[output])["AssumeRolePolicyDocument"]
        assert web_identity_allowed(trust, stack["oidc"], claims) is expected, (output, who)
    # The audience is checked too: the same subject for another audience is refused.
    other = {**claims, f"{OIDC_URL}:aud": "https://github.com/evil"}
    assert not web_identity_allowed(role_of(session, outputs["TrainRoleArn"])["AssumeRolePolicyDocument"],
                                    stack["oidc"], other)  # fmt: skip
