"""Teardown acts only on the calling run's resources (issue 30, item 5).

A branch's workflow may call the default branch's gpu-runner-stop.yml with any `instance-id`, `runner-id` and
`parameter` (another run's are printed in its log). The stop job runs `gpu-runner teardown` in the CALLER's run
(GitHub gives a called workflow the caller's github context), so the run key (repository, run id, attempt, slot)
is the caller's own: every id it is given is a claim, checked against that key; what it tears down it finds by
that key. Here the caller is cli_env's run (octo-org/octo-repo, run 4321, attempt 2) and each victim is real:
launched by gpu-runner, or made in moto with the tags it would carry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_runner import cli
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import GitHubRunners
from gpu_runner.core.naming import RunContext
from gpu_runner.core.settings import Settings
from gpu_runner.ec2_runner import lifecycle
from gpu_runner.ec2_runner.ownership import RunScope
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY, GitHubDouble
from gpu_runner_testing.live_instances import run_as_launched

CALLER_RUN, CALLER_ATTEMPT = "4321", "2"  # cli_env's GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT
OTHER_REPOSITORY = "octo-org/other-repo"


def victim_ctx(**changes: str) -> RunContext:
    base = RunContext(
        repository=DEFAULT_REPOSITORY, run_id="9001", run_attempt="1", branch="train/victim",
        commit="b" * 40, workflow_ref=f"{DEFAULT_REPOSITORY}/.github/workflows/train.yml@refs/heads/train/victim",
        event_name="push",
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


# A default-branch prediction (predict.yml's own run on the schedule): what the attacker most wants to end.
PREDICT = victim_ctx(
    run_id="9002", branch="main", event_name="schedule",
    workflow_ref=f"{DEFAULT_REPOSITORY}/.github/workflows/predict.yml@refs/heads/main",
)  # fmt: skip


def state(aws: Aws, instance_id: str) -> str:
    reply = aws.client("ec2", REGION).describe_instances(InstanceIds=[instance_id])
    return reply["Reservations"][0]["Instances"][0]["State"]["Name"]


def parameter_names(aws: Aws) -> set[str]:
    pages = aws.client("ssm", REGION).get_paginator("describe_parameters").paginate()
    return {p["Name"] for page in pages for p in page["Parameters"]}


def teardown(cli_env: Path, *flags: str) -> int:
    """The stop job's command, in the caller's run (cli_env's environment)."""
    return cli.main(["--settings", str(cli_env), "teardown", f"--region={REGION}", *flags])


def launch_own(cli_env: Path, *flags: str) -> dict[str, str]:
    """The caller's own start job: launch in cli_env's run; its step outputs."""
    assert cli.main(["--settings", str(cli_env), "launch", "--spot=false", *flags]) == 0
    return dict(line.split("=", 1) for line in (cli_env.parent / "out").read_text().splitlines())


Victim = Callable[[Settings, Aws, GitHubRunners, str], str]


def launched(ctx: RunContext) -> Victim:
    return lambda settings, aws, github, ami: (
        lifecycle.launch(settings, ctx, aws, github).launched.instance_id
    )


def made(ctx: RunContext | None) -> Victim:
    return lambda settings, aws, github, ami: run_as_launched(aws.client("ec2", REGION), ami, settings, ctx)


# (victim, the caller's --slot, what the refusal says)
INSTANCE_VICTIMS = {
    "another run's training": (launched(victim_ctx()), "", "its tag gpu-runner:run-id is '9001', not this run's '4321'"),
    "a default-branch prediction": (launched(PREDICT), "", "its tag gpu-runner:run-id is '9002', not this run's '4321'"),
    "another leg of this sweep run": (
        launched(victim_ctx(run_id=CALLER_RUN, run_attempt=CALLER_ATTEMPT, slot="3")), "4",
        "its tag gpu-runner:slot is '3', not this leg's '4'",
    ),
    "this run's id in another repository": (
        made(victim_ctx(repository=OTHER_REPOSITORY, run_id=CALLER_RUN, run_attempt=CALLER_ATTEMPT)), "",
        f"its tag gpu-runner:repository is '{OTHER_REPOSITORY}', not '{DEFAULT_REPOSITORY}'",
    ),
    "an untagged instance": (made(None), "", "it has no gpu-runner:managed-by tag (not an instance gpu-runner launched)"),
    "a later attempt of this run": (
        made(victim_ctx(run_id=CALLER_RUN, run_attempt="3")), "",
        "its tag gpu-runner:run-attempt is '3', later than this attempt (2)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("victim", INSTANCE_VICTIMS, ids=lambda v: v.replace(" ", "-"))
def test_another_runs_instance_is_refused_and_keeps_running(
    victim: str, cli_env: Path, settings: Settings, ami: str, aws: Aws, github: GitHubRunners, capsys
) -> None:
    make, slot, why = INSTANCE_VICTIMS[victim]
    instance_id = make(settings, aws, github, ami)
    flags = [f"--instance-id={instance_id}", *([f"--slot={slot}"] if slot else [])]
    assert teardown(cli_env, *flags) == 1
    assert state(aws, instance_id) in {"pending", "running"}
    err = capsys.readouterr().err
    assert f"refused --instance-id={instance_id}: {why}" in err, err


def test_another_runs_runner_is_refused_and_stays_registered(
    cli_env: Path, settings: Settings, aws: Aws, github: GitHubRunners, github_double: GitHubDouble, capsys
) -> None:
    victim = lifecycle.launch(settings, victim_ctx(), aws, github)
    permanent = github_double.add_runner("build-box-1")["id"]  # a self-hosted runner the team keeps
    for runner_id, name in ((victim.runner_id, victim.runner_name), (permanent, "build-box-1")):
        assert teardown(cli_env, f"--runner-id={runner_id}") == 1
        err = capsys.readouterr().err
        assert f"refused --runner-id={runner_id}: runner {runner_id} is named '{name}'" in err, err
    assert set(github_double.runners) == {victim.runner_id, permanent}
    assert not [c for c in github_double.calls if c.method == "DELETE"]


def test_another_runs_parameter_is_refused_and_kept(
    cli_env: Path, settings: Settings, aws: Aws, github: GitHubRunners, capsys
) -> None:
    victim = lifecycle.launch(settings, victim_ctx(), aws, github)
    # The GitHub credential's parameter (`<prefix>-github-credential`): the role cannot delete it, the code must
    # not ask either.
    credential = f"{settings.ssm_prefix}-github-credential"
    aws.client("ssm", REGION).put_parameter(Name=credential, Value="{}", Type="SecureString")
    for parameter in (victim.parameter, credential):
        assert teardown(cli_env, f"--parameter={parameter}") == 1
        err = capsys.readouterr().err
        assert (
            f"refused --parameter={parameter}: this run's JIT config is /gpu-runner/demo/4321-2/jitconfig"
            in err
        )
    assert {victim.parameter, credential} <= parameter_names(aws)


def test_foreign_ids_do_not_keep_this_runs_own_resources_from_being_torn_down(
    cli_env: Path, settings: Settings, aws: Aws, github: GitHubRunners, github_double: GitHubDouble, capsys
) -> None:
    """The attack of the issue: a branch's stop call passes another run's three ids instead of its own."""
    own = launch_own(cli_env)
    victim = lifecycle.launch(settings, victim_ctx(), aws, github)
    foreign = [f"--instance-id={victim.launched.instance_id}", f"--runner-id={victim.runner_id}",
               f"--parameter={victim.parameter}"]  # fmt: skip
    assert teardown(cli_env, *foreign) == 1
    err = capsys.readouterr().err
    assert err.count("refused --") == 3, err
    # The victim is untouched ...
    assert state(aws, victim.launched.instance_id) in {"pending", "running"}
    assert set(github_double.runners) == {victim.runner_id}
    assert victim.parameter in parameter_names(aws)
    # ... and the caller's own instance, runner and parameter are gone: found by the run key, not by the ids.
    assert state(aws, own["instance-id"]) in {"shutting-down", "terminated"}
    assert own["parameter"] not in parameter_names(aws)


def test_a_missing_instance_id_still_ends_this_runs_instance(
    cli_env: Path, aws: Aws, github_double: GitHubDouble, capsys
) -> None:
    """start's own failure path after a launch killed right after RunInstances: no instance-id output."""
    own = launch_own(cli_env)
    assert teardown(cli_env, f"--runner-id={own['runner-id']}", f"--parameter={own['parameter']}") == 0
    assert state(aws, own["instance-id"]) in {"shutting-down", "terminated"}
    assert github_double.runners == {} and own["parameter"] not in parameter_names(aws)
    assert teardown(cli_env) == 0  # nothing given, nothing left: a no-op that says so
    assert "refused" not in capsys.readouterr().err


def test_a_rerun_of_the_stop_job_tears_down_the_earlier_attempts_resources(
    cli_env: Path, aws: Aws, github_double: GitHubDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub: a re-run of failed jobs keeps the outputs of the jobs it does not re-run ("Re-running workflows and
    jobs"), so the stop job of attempt 3 is handed attempt 2's ids. They are this run's: torn down."""
    own = launch_own(cli_env)
    monkeypatch.setenv("GITHUB_RUN_ATTEMPT", "3")
    ids = [
        f"--instance-id={own['instance-id']}",
        f"--runner-id={own['runner-id']}",
        f"--parameter={own['parameter']}",
    ]
    assert teardown(cli_env, *ids) == 0
    assert state(aws, own["instance-id"]) in {"shutting-down", "terminated"}
    assert github_double.runners == {} and own["parameter"] not in parameter_names(aws)


def test_tags_that_cannot_be_read_leave_the_instance_to_a_rerun_but_not_the_rest(
    settings: Settings, ctx: RunContext, aws: Aws, faults: AwsFaults, github: GitHubRunners,
    github_double: GitHubDouble,
) -> None:  # fmt: skip
    """DescribeInstances refused: whose the instance is cannot be checked, so nothing is terminated on the caller's
    word; the instance step fails naming it, the runner and the parameter still go (the runner's exit halts the
    instance, and the reaper ends an orphan after reap_grace_minutes), and a re-run of the stop job ends it."""
    outcome = lifecycle.launch(settings, ctx, aws, github)
    scope = RunScope(ctx, settings.project, settings.ssm_prefix)
    ids = {"instance_id": outcome.launched.instance_id, "runner_id": outcome.runner_id,
           "parameter": outcome.parameter}  # fmt: skip
    faults.fail("ec2", "DescribeInstances", "UnauthorizedOperation", times=1, status=403)  # not retried
    with pytest.raises(RunnerError, match=r"teardown incomplete .*instance: .*UnauthorizedOperation"):
        lifecycle.teardown(aws, github, scope, region=REGION, **ids)
    assert state(aws, outcome.launched.instance_id) == "running"
    assert github_double.runners == {} and outcome.parameter not in parameter_names(aws)
    report = lifecycle.teardown(aws, github, scope, region=REGION, **ids)
    assert report.instance == "shutting-down" and report.refused == ()
    assert state(aws, outcome.launched.instance_id) in {"shutting-down", "terminated"}
