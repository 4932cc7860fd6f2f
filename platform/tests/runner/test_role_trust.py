"""Who may assume the stack's launch (train), reaper, sweep, predict and predict launch roles: the OIDC trust of
the deployed roles."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_runner_testing.github_double import DEFAULT_REPOSITORY
from gpu_runner_testing.gpu_runner_stack import (
    _trust_subjects,
    role_of,
)
from gpu_runner_testing.iam_requests import (
    web_identity_allowed,
)
from gpu_runner_testing.stack_deploy import OIDC_URL, TEST_PLATFORM

# Item 2 of issue 13: which OIDC tokens may assume the launch (train) and reaper roles. `sub` as GitHub writes it
# once bootstrap set the template repo, context, job_workflow_ref (GitHub docs "OpenID Connect reference" >
# "Customizing the subject claims", example "Requiring a reusable workflow and other claims", read 2026-12-01).
_O, _N = DEFAULT_REPOSITORY.split("/")
_WF = f"{_O}/{_N}/.github/workflows"
# Issue 31: start and stop are the platform's reusable workflows, trusted at the commit the project pins (bootstrap's
# --platform; the test stacks' fixed TEST_PLATFORM). A caller that pins a reusable workflow by SHA gets
# job_workflow_ref <path>@<sha>, without refs/ (gpu_runner/setup/gpu-runner.yaml TrainRole gives the evidence).
_PLATFORM, _C = TEST_PLATFORM.split("@")
_PF = f"{_PLATFORM}/.github/workflows"
_OTHER_COMMIT = "0" * 40
SUB_TABLE = [
    # (who, sub, may assume the launch role, the reaper role, the sweep role, the predict role, the predict launch
    # role)
    ("the pinned platform's start workflow, push to a train branch",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_C}", True, False, False, False, False),
    ("the pinned platform's stop workflow, immutable ids",
     f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/train/a/b:job_workflow_ref:{_PF}/gpu-runner-stop.yml@{_C}", True, False, False, False, False),
    # Issue 31: which launch workflow a train branch's train.yml may call and still get the role.
    ("the project's own copy of start at the default branch (the trust before the platform held it)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False, False, False, False),
    ("the platform's start at another commit (an older release, or a fork's commit reached through its name)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_OTHER_COMMIT}", False, False, False, False, False),
    ("a fork of the platform at the pinned commit",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:evil/{_PLATFORM.split('/')[1]}/.github/workflows/gpu-runner-start.yml@{_C}", False, False, False, False, False),
    ("the platform's start at a branch (its default branch)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_PF}/gpu-runner-start.yml@refs/heads/main", False, False, False, False, False),
    ("the platform's start at a branch named like the pinned commit",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_PF}/gpu-runner-start.yml@refs/heads/{_C}", False, False, False, False, False),
    ("the platform's stop at another commit, immutable ids",
     f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/sweep/a:job_workflow_ref:{_PF}/gpu-runner-stop.yml@{_OTHER_COMMIT}", False, False, False, False, False),
    ("another file of the pinned platform (a workflow it may add later)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_PF}/steal.yml@{_C}", False, False, False, False, False),
    ("the project's own copy of start at main, called on main",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/main", False, False, False, False, False),
    ("the platform's start at another commit, called on main",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_OTHER_COMMIT}", False, False, False, False, False),
    ("a branch's own train.yml job (it rewrote the workflow)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/train.yml@refs/heads/train/demo", False, False, False, False, False),
    ("the branch's own copy of the reusable workflow (uses: ./...)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/train/demo", False, False, False, False, False),
    ("a pull request calling the default branch's workflow",
     f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_C}", False, False, False, False, False),
    ("a branch outside the train prefix",
     f"repo:{_O}/{_N}:ref:refs/heads/feature:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_C}", False, False, False, False, False),
    ("a job with an environment",
     f"repo:{_O}/{_N}:environment:prod:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_C}", False, False, False, False, False),
    ("another repository's workflow of the same name",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:evil/{_N}/.github/workflows/gpu-runner-start.yml@{_C}", False, False, False, False, False),
    ("a tag",
     f"repo:{_O}/{_N}:ref:refs/tags/v1:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_C}", False, False, False, False, False),
    ("a recycled owner name (other ids)",
     f"repo:{_O}@9999/{_N}@2002:ref:refs/heads/train/demo:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_C}", False, False, False, False, False),
    ("GitHub's default subject (template never set): any train branch's workflow",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo", False, False, False, False, False),
    ("the default branch's reap.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/reap.yml@refs/heads/main", False, True, False, False, False),
    ("a train branch's reap.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/reap.yml@refs/heads/train/demo", False, False, False, False, False),
    # The trust sees the called file and the run's ref, not the caller (AWS evaluates only `aud` and `sub`): any
    # default-branch workflow calling start/stop there gets the predict launch role; the callers' check in
    # gpu-runner-start.yml / gpu-runner-stop.yml (the platform's code at the pinned commit) is what names predict.yml.
    ("the pinned platform's start workflow called on main (predict.yml's gpu device; also a train.yml dispatched on main)",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_C}", False, False, False, False, True),
    ("GitHub's default subject on the default branch",
     f"repo:{_O}/{_N}:ref:refs/heads/main", False, False, False, False, False),
    # Sweeps (issue 15): per-trial start/stop jobs hold the launch role, sweep.yml's own jobs the sweep role.
    ("the pinned platform's start workflow, called by a sweep branch's sweep.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/sweep/lr:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_C}", True, False, False, False, False),
    ("the pinned platform's stop workflow from a sweep branch, immutable ids",
     f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/sweep/a/b:job_workflow_ref:{_PF}/gpu-runner-stop.yml@{_C}", True, False, False, False, False),
    ("sweep.yml's plan/collect job on a sweep branch",
     f"repo:{_O}/{_N}:ref:refs/heads/sweep/lr:job_workflow_ref:{_WF}/sweep.yml@refs/heads/sweep/lr", False, False, True, False, False),
    ("sweep.yml's job on a nested sweep branch, immutable ids",
     f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/sweep/a/b:job_workflow_ref:{_WF}/sweep.yml@refs/heads/sweep/a/b", False, False, True, False, False),
    ("a train branch's sweep.yml (a train-branch token)",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/sweep.yml@refs/heads/train/demo", False, False, False, False, False),
    ("a pull request's sweep.yml",
     f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_WF}/sweep.yml@refs/pull/7/merge", False, False, False, False, False),
    ("a pull request whose head is a sweep branch (its context is pull_request all the same)",
     f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_WF}/sweep.yml@refs/heads/sweep/lr", False, False, False, False, False),
    ("another workflow on a sweep branch (steal.yml)",
     f"repo:{_O}/{_N}:ref:refs/heads/sweep/lr:job_workflow_ref:{_WF}/steal.yml@refs/heads/sweep/lr", False, False, False, False, False),
    ("a sweep branch's train.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/sweep/lr:job_workflow_ref:{_WF}/train.yml@refs/heads/sweep/lr", False, False, False, False, False),
    ("a reusable workflow a sweep branch's sweep.yml calls (its own path)",
     f"repo:{_O}/{_N}:ref:refs/heads/sweep/lr:job_workflow_ref:{_WF}/helper.yml@refs/heads/sweep/lr", False, False, False, False, False),
    ("a sweep branch calling the default branch's sweep.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/sweep/lr:job_workflow_ref:{_WF}/sweep.yml@refs/heads/main", False, False, False, False, False),
    ("the default branch's sweep.yml on main",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/sweep.yml@refs/heads/main", False, False, False, False, False),
    ("sweep.yml read at a sweep branch but run on a train branch",
     f"repo:{_O}/{_N}:ref:refs/heads/train/x:job_workflow_ref:{_WF}/sweep.yml@refs/heads/sweep/x", False, False, False, False, False),
    ("another repository's sweep.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/sweep/lr:job_workflow_ref:evil/{_N}/.github/workflows/sweep.yml@refs/heads/sweep/lr", False, False, False, False, False),
    ("a fork (another repository) on a sweep branch",
     f"repo:{_O}/{_N}-fork:ref:refs/heads/sweep/lr:job_workflow_ref:{_O}/{_N}-fork/.github/workflows/sweep.yml@refs/heads/sweep/lr", False, False, False, False, False),
    ("a look-alike branch prefix (sweepx/)",
     f"repo:{_O}/{_N}:ref:refs/heads/sweepx/lr:job_workflow_ref:{_WF}/sweep.yml@refs/heads/sweepx/lr", False, False, False, False, False),
    ("a recycled owner name on a sweep branch (other ids)",
     f"repo:{_O}@9999/{_N}@2002:ref:refs/heads/sweep/lr:job_workflow_ref:{_WF}/sweep.yml@refs/heads/sweep/lr", False, False, False, False, False),
    ("GitHub's default subject on a sweep branch",
     f"repo:{_O}/{_N}:ref:refs/heads/sweep/lr", False, False, False, False, False),
    ("an environment job of sweep.yml",
     f"repo:{_O}/{_N}:environment:prod:job_workflow_ref:{_WF}/sweep.yml@refs/heads/sweep/lr", False, False, False, False, False),
    # Batch prediction (issue 16): predict.yml's own jobs hold the predict role, its gpu start/stop jobs the
    # predict launch role; both only from the default branch.
    ("the default branch's predict.yml on main (a dispatch or its schedule)",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/predict.yml@refs/heads/main", False, False, False, True, False),
    ("the default branch's predict.yml on main, immutable ids",
     f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/main:job_workflow_ref:{_WF}/predict.yml@refs/heads/main", False, False, False, True, False),
    ("the pinned platform's stop workflow called on main, immutable ids",
     f"repo:{_O}@1001/{_N}@2002:ref:refs/heads/main:job_workflow_ref:{_PF}/gpu-runner-stop.yml@{_C}", False, False, False, False, True),
    ("a push to another branch running its predict.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/feature:job_workflow_ref:{_WF}/predict.yml@refs/heads/feature", False, False, False, False, False),
    ("a train branch's predict.yml",
     f"repo:{_O}/{_N}:ref:refs/heads/train/demo:job_workflow_ref:{_WF}/predict.yml@refs/heads/train/demo", False, False, False, False, False),
    ("the default branch's predict.yml dispatched on another branch (uses: ...@main from a branch)",
     f"repo:{_O}/{_N}:ref:refs/heads/feature:job_workflow_ref:{_WF}/predict.yml@refs/heads/main", False, False, False, False, False),
    ("predict.yml read at another branch but run on main",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/predict.yml@refs/heads/feature", False, False, False, False, False),
    ("a pull request's predict.yml (a fork's)",
     f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_WF}/predict.yml@refs/pull/7/merge", False, False, False, False, False),
    ("a pull request calling the default branch's predict.yml",
     f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_WF}/predict.yml@refs/heads/main", False, False, False, False, False),
    ("predict.yml with an environment",
     f"repo:{_O}/{_N}:environment:prod:job_workflow_ref:{_WF}/predict.yml@refs/heads/main", False, False, False, False, False),
    ("predict.yml on a tag",
     f"repo:{_O}/{_N}:ref:refs/tags/v1:job_workflow_ref:{_WF}/predict.yml@refs/tags/v1", False, False, False, False, False),
    ("another repository's predict.yml",
     f"repo:evil/{_N}:ref:refs/heads/main:job_workflow_ref:evil/{_N}/.github/workflows/predict.yml@refs/heads/main", False, False, False, False, False),
    ("another repository calling our default branch's predict.yml and start workflow",
     f"repo:{_O}/{_N}-fork:ref:refs/heads/main:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_C}", False, False, False, False, False),
    ("a recycled owner name on main (other ids)",
     f"repo:{_O}@9999/{_N}@2002:ref:refs/heads/main:job_workflow_ref:{_WF}/predict.yml@refs/heads/main", False, False, False, False, False),
    ("a branch calling the pinned platform's start workflow (not a train or sweep branch)",
     f"repo:{_O}/{_N}:ref:refs/heads/feature:job_workflow_ref:{_PF}/gpu-runner-start.yml@{_C}", False, False, False, False, False),
    ("main calling a branch's copy of the start workflow",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/feature", False, False, False, False, False),
    ("a branch named like the ref, its own copy (no wildcard before .yml@)",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/gpu-runner-start.yml@refs/heads/x.yml@refs/heads/main", False, False, False, False, False),
    ("a pull request calling the pinned platform's stop workflow",
     f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_PF}/gpu-runner-stop.yml@{_C}", False, False, False, False, False),
]  # fmt: skip
ROLE_OUTPUTS = ("TrainRoleArn", "ReaperRoleArn", "SweepRoleArn", "PredictRoleArn", "PredictLaunchRoleArn")


def test_roles_trust_only_this_repository_in_both_subject_forms(stack: dict[str, Any]) -> None:
    session, outputs = stack["session"], stack["outputs"]
    owner, name = DEFAULT_REPOSITORY.split("/")
    provider, subjects = _trust_subjects(role_of(session, outputs["TrainRoleArn"]))
    assert provider == stack["oidc"]
    workflows = f"{owner}/{name}/.github/workflows"
    assert subjects == [
        f"repo:{owner}{ids[0]}/{name}{ids[1]}:ref:refs/heads/{prefix}*:job_workflow_ref:{_PF}/gpu-runner-{job}.yml@{_C}"
        for prefix in ("train/", "sweep/")
        for ids in (("", ""), ("@1001", "@2002"))
        for job in ("start", "stop")
    ]
    provider, subjects = _trust_subjects(role_of(session, outputs["ReaperRoleArn"]))
    assert provider == stack["oidc"]
    assert subjects == [
        f"repo:{owner}/{name}:ref:refs/heads/main:job_workflow_ref:{workflows}/reap.yml@refs/heads/main",
        f"repo:{owner}@1001/{name}@2002:ref:refs/heads/main:job_workflow_ref:{workflows}/reap.yml@refs/heads/main",
    ]
    provider, subjects = _trust_subjects(role_of(session, outputs["SweepRoleArn"]))
    assert provider == stack["oidc"]
    assert subjects == [
        f"repo:{owner}/{name}:ref:refs/heads/sweep/*:job_workflow_ref:{workflows}/sweep.yml@refs/heads/sweep/*",
        f"repo:{owner}@1001/{name}@2002:ref:refs/heads/sweep/*:job_workflow_ref:{workflows}/sweep.yml@refs/heads/sweep/*",
    ]
    provider, subjects = _trust_subjects(role_of(session, outputs["PredictRoleArn"]))
    assert provider == stack["oidc"]
    assert subjects == [
        f"repo:{owner}{ids[0]}/{name}{ids[1]}:ref:refs/heads/main:job_workflow_ref:{workflows}/predict.yml@refs/heads/main"
        for ids in (("", ""), ("@1001", "@2002"))
    ]
    provider, subjects = _trust_subjects(role_of(session, outputs["PredictLaunchRoleArn"]))
    assert provider == stack["oidc"]
    assert subjects == [
        f"repo:{owner}{ids[0]}/{name}{ids[1]}:ref:refs/heads/main:job_workflow_ref:{_PF}/gpu-runner-{job}.yml@{_C}"
        for ids in (("", ""), ("@1001", "@2002"))
        for job in ("start", "stop")
    ]


@pytest.mark.parametrize(
    ("who", "sub", "launch", "reap", "sweep", "predict", "predict_launch"),
    SUB_TABLE,
    ids=[row[0] for row in SUB_TABLE],
)
def test_only_the_default_branch_workflows_assume_the_roles(
    stack: dict[str, Any], who: str, sub: str, launch: bool, reap: bool, sweep: bool, predict: bool,
    predict_launch: bool,
) -> None:  # fmt: skip
    session, outputs = stack["session"], stack["outputs"]
    claims = {f"{OIDC_URL}:aud": "sts.amazonaws.com", f"{OIDC_URL}:sub": sub}
    expectations = (launch, reap, sweep, predict, predict_launch)
    for output, expected in zip(ROLE_OUTPUTS, expectations, strict=True):
        trust = role_of(session, outputs[output])["AssumeRolePolicyDocument"]
        assert web_identity_allowed(trust, stack["oidc"], claims) is expected, (output, who)
        # The audience is checked too: the same subject for another audience is refused.
        other = {**claims, f"{OIDC_URL}:aud": "https://github.com/evil"}
        assert not web_identity_allowed(trust, stack["oidc"], other), (output, who)
        # And another provider (another account's GitHub OIDC provider ARN) with the same claims.
        assert not web_identity_allowed(trust, stack["oidc"] + "-other", claims), (output, who)


# Issue 30, High 3: promote.yml reads the held-out set (s3://<bucket>/holdout/) with its own role. Its job names
# `environment: production`, so GitHub's `sub` context is `environment:production`, not the ref ("The subject claim
# includes the environment name when the job references an environment": GitHub docs "OpenID Connect reference" >
# "Filtering for a specific environment"; with bootstrap's customised claims, repo:O/R:<context>:job_workflow_ref:
# ...). The ref is bound by job_workflow_ref (the file as read at the default branch) and by the environment's own
# deployment-branch rule.
PROMOTE_TABLE = [
    # (who, sub, may assume the promote role)
    ("the default branch's promote.yml in the production environment",
     f"repo:{_O}/{_N}:environment:production:job_workflow_ref:{_WF}/promote.yml@refs/heads/main", True),
    ("the same, immutable ids",
     f"repo:{_O}@1001/{_N}@2002:environment:production:job_workflow_ref:{_WF}/promote.yml@refs/heads/main", True),
    ("a branch's promote.yml in the production environment",
     f"repo:{_O}/{_N}:environment:production:job_workflow_ref:{_WF}/promote.yml@refs/heads/feature", False),
    ("the default branch's promote.yml dispatched on a train branch (the file is read there)",
     f"repo:{_O}/{_N}:environment:production:job_workflow_ref:{_WF}/promote.yml@refs/heads/train/x", False),
    ("promote.yml in another environment",
     f"repo:{_O}/{_N}:environment:staging:job_workflow_ref:{_WF}/promote.yml@refs/heads/main", False),
    ("promote.yml in an environment whose name starts like it",
     f"repo:{_O}/{_N}:environment:production-old:job_workflow_ref:{_WF}/promote.yml@refs/heads/main", False),
    ("promote.yml on the default branch without an environment",
     f"repo:{_O}/{_N}:ref:refs/heads/main:job_workflow_ref:{_WF}/promote.yml@refs/heads/main", False),
    ("a pull request's promote.yml",
     f"repo:{_O}/{_N}:pull_request:job_workflow_ref:{_WF}/promote.yml@refs/pull/7/merge", False),
    ("another workflow of the default branch in the production environment",
     f"repo:{_O}/{_N}:environment:production:job_workflow_ref:{_WF}/predict.yml@refs/heads/main", False),
    ("a branch's own workflow in the production environment",
     f"repo:{_O}/{_N}:environment:production:job_workflow_ref:{_WF}/steal.yml@refs/heads/feature", False),
    ("promote.yml read at a tag",
     f"repo:{_O}/{_N}:environment:production:job_workflow_ref:{_WF}/promote.yml@refs/tags/v1", False),
    ("another repository's promote.yml",
     f"repo:evil/{_N}:environment:production:job_workflow_ref:evil/{_N}/.github/workflows/promote.yml@refs/heads/main", False),
    ("a recycled owner name (other ids)",
     f"repo:{_O}@9999/{_N}@2002:environment:production:job_workflow_ref:{_WF}/promote.yml@refs/heads/main", False),
    ("GitHub's default subject in the production environment",
     f"repo:{_O}/{_N}:environment:production", False),
]  # fmt: skip


@pytest.mark.parametrize(("who", "sub", "allowed"), PROMOTE_TABLE, ids=[row[0] for row in PROMOTE_TABLE])
def test_only_the_default_branch_promote_workflow_in_production_assumes_the_promote_role(
    stack: dict[str, Any], who: str, sub: str, allowed: bool
) -> None:
    session, outputs = stack["session"], stack["outputs"]
    claims = {f"{OIDC_URL}:aud": "sts.amazonaws.com", f"{OIDC_URL}:sub": sub}
    trust = role_of(session, outputs["PromoteRoleArn"])["AssumeRolePolicyDocument"]
    assert web_identity_allowed(trust, stack["oidc"], claims) is allowed, who
    assert not web_identity_allowed(
        trust, stack["oidc"], {**claims, f"{OIDC_URL}:aud": "https://github.com/evil"}
    )
    assert not web_identity_allowed(trust, stack["oidc"] + "-other", claims)
    # No other role of the stack takes promote's token.
    for output in ROLE_OUTPUTS:
        other = role_of(session, outputs[output])["AssumeRolePolicyDocument"]
        assert not web_identity_allowed(other, stack["oidc"], claims), (output, who)


def test_no_token_of_the_other_roles_assumes_the_promote_role(stack: dict[str, Any]) -> None:
    trust = role_of(stack["session"], stack["outputs"]["PromoteRoleArn"])["AssumeRolePolicyDocument"]
    for who, sub, *_ in SUB_TABLE:
        claims = {f"{OIDC_URL}:aud": "sts.amazonaws.com", f"{OIDC_URL}:sub": sub}
        assert not web_identity_allowed(trust, stack["oidc"], claims), who
