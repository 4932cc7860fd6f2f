"""`gpu-runner doctor` against a realistic account: the stack deployed to the moto server by the real bootstrap,
the GitHub REST double, a real MLflow server. Every check is run both ways: passing on the healthy account, and
failing (with its fix) with one fault planted. Every run is recorded through botocore's `before-call` hook and must
make no mutating AWS call, and only GET requests to GitHub (plus an App's token exchange).

moto gaps filled here, each said where it is done: CloudFormation does not create AWS::IAM::OIDCProvider (the
provider is created with boto3 and passed to bootstrap, as `--oidc-provider-arn` does for a user); Service Quotas
knows no ec2 quota and has no GetAWSDefaultServiceQuota (answered through the botocore hook with bodies shaped as
botocore's service-quotas model says); moto's create-service-linked-role names the spot role
AWSServiceRoleForspot where AWS names it AWSServiceRoleForEC2Spot (created with create_role under AWS's name and
path instead).
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import socket
import uuid
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
import yaml
from botocore.exceptions import ClientError

from gpu_runner import cli
from gpu_runner.core.aws import Aws
from gpu_runner.core.settings import Settings, settings_from_mapping
from gpu_runner.core.stack_names import batch_stack_name
from gpu_runner.doctor import doctor, doctor_aws, doctor_checks, doctor_github, doctor_mlflow
from gpu_runner.doctor.doctor_checks import Outcome, Target
from gpu_runner.pin.project_pin import trusted_platform
from gpu_runner_testing import service_quotas, stack_deploy
from gpu_runner_testing.aws_faults import AwsFaults
from gpu_runner_testing.doctor_report import EVERY_CHECK
from gpu_runner_testing.github_double import (
    ADMIN_TOKEN,
    DEFAULT_APP_ID,
    DEFAULT_REPOSITORY,
    DEFAULT_TOKEN,
    GitHubDouble,
    app_private_key_pem,
)
from gpu_runner_testing.github_settings import setup_guards
from gpu_runner_testing.stack_deploy import OIDC_URL, TEST_PLATFORM

# A region of its own: the other runner tests count what is left in theirs. moto's offerings there (from AWS's
# published data): g4dn.xlarge and g5.xlarge in the region; ap-northeast-1d offers g4dn.xlarge but not g5.xlarge.
REGION = "ap-northeast-1"
PUBLIC_AMI_PARAMETER = "/aws/service/ami-amazon-linux-latest/amzn2-ami-hvm-x86_64-gp2"
OWNER, NAME = DEFAULT_REPOSITORY.split("/")
LINE = re.compile(r"(✓|✗|!) [A-Za-z0-9 ./-]+: \S.*")
READ_ONLY_OPERATION = re.compile(r"(Get|List|Describe|Head)[A-Za-z]*")

# The platform the doctor's test stacks trust (stack_deploy passes it to bootstrap): doctor compares the roles'
# trust with it as with a project's pin.
TRUSTED = trusted_platform(TEST_PLATFORM, Path())  # given, so no project is read
PLATFORM_WORKFLOWS = f"{TRUSTED.repository}/.github/workflows"


def test_quota_bodies_are_shaped_as_botocore_says() -> None:
    model = botocore.session.get_session().get_service_model("service-quotas")
    for operation in ("GetServiceQuota", "GetAWSDefaultServiceQuota"):
        output = model.operation_model(operation).output_shape
        quota = output.members["Quota"]
        body = quota_body("L-DB2E81BA", 8.0)
        assert set(body) <= set(output.members)
        assert set(body["Quota"]) <= set(quota.members)
        assert set(body["Quota"]["UsageMetric"]) <= set(quota.members["UsageMetric"].members)
    # The control: the same comparison catches a misspelt key (botocore would silently drop it, leaving no Value).
    misspelt = {**quota_body("L-DB2E81BA", 8.0)["Quota"], "Valeu": 8.0}
    assert not set(misspelt) <= set(model.shape_for("ServiceQuota").members)


def test_the_read_only_guard_catches_a_mutating_call(world: World) -> None:
    """The control of `run`'s assertion: a check that writes (here an SSM parameter) fails the test."""

    def writes(target: Target, aws: Aws) -> Iterator[Outcome]:
        aws.client("ssm", REGION).put_parameter(
            Name="/doctor/planted", Value="x", Type="String", Overwrite=True
        )
        yield doctor_checks.passed("planted", "wrote")

    with pytest.raises(AssertionError, match="ssm:PutParameter"):
        run(world, [writes])
    world.session.client("ssm", region_name=REGION).delete_parameter(Name="/doctor/planted")


def test_a_healthy_account_passes_every_check(world: World) -> None:
    answer_quotas(world.faults, on_demand=8, spot=8)
    outcomes = run(world)
    assert all(o.ok for o in outcomes), [o.line() for o in outcomes if not o.ok]
    checks = [o.check for o in outcomes]
    assert checks == list(EVERY_CHECK)  # what a project's setup page lists (its docs test)


def test_the_doctor_command_prints_one_line_per_check_and_fails_on_any_cross(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command line a project's `make doctor` runs (its test_make_targets parses the Makefile's with this CLI),
    run: exact line format, exit status 0, then 1 with one fault."""
    settings_path = tmp_path / "gpu-runner.yaml"
    # The stack was deployed with bootstrap's default prefix and default branch. The branch prefix is the settings
    # file's (its one source).
    settings_path.write_text(yaml.safe_dump({**world.deployed["raw"], "train_branch_prefix": "train/"}))
    # A project's Makefile passes no --platform (doctor reads the pin in its pyproject.toml); the stack trusts the
    # test platform (stack_deploy's bootstrap), so it is named here.
    argv = ["--settings", str(settings_path), "doctor", "--repository", DEFAULT_REPOSITORY, "--default-branch", "main",
            "--platform", TEST_PLATFORM]  # fmt: skip
    for key, value in world.target.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)

    def main() -> tuple[int, list[str]]:
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            code = cli.main(argv)
        return code, out.getvalue().splitlines()

    answer_quotas(world.faults, on_demand=8, spot=8)
    # Clients come from the default boto3 chain (the session the faults are planted on is not used here).
    monkeypatch.setattr(cli, "Aws", lambda: world.aws)
    code, lines = main()
    assert code == 0, lines
    assert all(LINE.fullmatch(line) and line.startswith("✓ ") for line in lines[:-1]), lines
    assert lines[-1] == f"all checks passed ({len(lines) - 1} checked)"

    world.github.set_variable("AWS_REAPER_ROLE_ARN", "arn:aws:iam::123456789012:role/other")
    code, lines = main()
    assert code == 1
    (bad,) = [line for line in lines if line.startswith("✗ ")]
    assert re.fullmatch(r"✗ repository variables and secrets: .+; fix: .+", bad), bad
    assert lines[-1].startswith("1 check(s) failed")


def test_a_settings_error_is_a_cross_line_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "gpu-runner.yaml"
    path.write_text(yaml.safe_dump({"project": "x", "region": "nowhere", "instance_types": ["g4dn.xlarge"]}))
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        code = cli.main(["--settings", str(path), "doctor", "--repository", DEFAULT_REPOSITORY])
    assert code == 1
    (line,) = out.getvalue().splitlines()
    assert line.startswith("✗ settings: ") and "region: 'nowhere'" in line and "; fix: correct " in line


def test_a_bad_repository_is_a_cross_line(world: World, tmp_path: Path) -> None:
    path = tmp_path / "gpu-runner.yaml"
    path.write_text(yaml.safe_dump(world.deployed["raw"]))
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        code = cli.main(["--settings", str(path), "doctor", "--repository", "not a repo"])
    assert code == 1
    assert out.getvalue().splitlines() == [
        "✗ repository: 'not a repo' is not owner/name; fix: pass --repository owner/name"
    ]


def test_no_aws_credentials_is_one_cross_and_github_is_still_checked(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key)
    world.session = boto3.Session(region_name=REGION)  # a fresh chain that finds nothing
    world.aws = Aws(world.session)
    outcomes = run(world)
    identity = one(outcomes, "AWS credentials")
    assert not identity.ok and "no AWS credentials" in identity.found and "aws sso login" in identity.fix
    assert {o.check for o in outcomes} == {
        "AWS credentials",
        "runner credential",
        "repository variables and secrets",
        "default branch protection",
        "production environment",
        "fork pull request approval",
        "MLflow",
    }


def test_an_unreachable_region_is_one_cross_naming_the_region(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A region without an endpoint (a typo such as eu-west-9) cannot be connected to; here the endpoint is a
    closed port, which botocore reports the same way (EndpointConnectionError)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{sock.getsockname()[1]}")
    world.session = boto3.Session(region_name=REGION)
    world.aws = Aws(world.session)
    identity = one(run(world, [doctor_aws.check_identity]), "AWS credentials")
    assert not identity.ok and "AWS unreachable" in identity.found and "region ap-northeast-1" in identity.fix


def test_an_unreachable_github_api_is_a_cross_not_a_traceback(world: World) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    world.target.env = {**world.target.env, "GITHUB_API_URL": dead}
    outcome = one(run(world, [doctor_github.check_repository_settings]), "repository variables and secrets")
    assert not outcome.ok and f"cannot reach the GitHub API at {dead}" in outcome.found


def test_a_missing_stack_is_a_cross_with_the_bootstrap_fix(world: World) -> None:
    world.target.settings = world.settings(project=f"never-deployed-{uuid.uuid4().hex[:6]}")
    answer_quotas(world.faults, on_demand=8, spot=8)
    outcomes = run(world)
    stack = one(outcomes, "stack")
    assert (
        not stack.ok and "does not exist in ap-northeast-1" in stack.found and "make bootstrap" in stack.fix
    )
    # The checks that need its outputs are not run (no KeyError); the others still are.
    assert not {"OIDC provider", "train role trust", "bucket"} & {o.check for o in outcomes}
    assert one(outcomes, "AMI").ok


def test_oidc_provider_missing(world: World) -> None:
    stack_checks(world)
    world.faults.fail("iam", "GetOpenIDConnectProvider", "NoSuchEntity", status=404)
    outcome = one(run(world, [doctor_aws.check_oidc_provider]), "OIDC provider")
    assert not outcome.ok and "does not exist" in outcome.found and "--oidc-provider-arn" in outcome.fix


def test_oidc_provider_present(world: World) -> None:
    stack_checks(world)
    outcome = one(run(world, [doctor_aws.check_oidc_provider]), "OIDC provider")
    assert outcome.ok and "sts.amazonaws.com" in outcome.found


TRAIN_TRUST_FAULTS = {
    "every repository of the owner": (
        [f"repo:{OWNER}/*:ref:refs/heads/train/*", f"repo:{OWNER}/*:ref:refs/heads/sweep/*"],
        "sts.amazonaws.com",
        "also trusts",
    ),
    "every branch": ([f"repo:{OWNER}/{NAME}:*"], "sts.amazonaws.com", "also trusts"),
    "another branch prefix": (
        [f"repo:{OWNER}/{NAME}:ref:refs/heads/experiments/*"],
        "sts.amazonaws.com",
        "does not trust",
    ),
    "no audience condition": ([f"repo:{OWNER}/{NAME}:ref:refs/heads/train/*"], None, "lacks"),
    "another audience": ([f"repo:{OWNER}/{NAME}:ref:refs/heads/train/*"], "example.com", "does not trust"),
    # A stack from before sweeps: its per-trial start and stop jobs would be refused credentials.
    "the train branches only": (
        [
            f"repo:{OWNER}/{NAME}:ref:refs/heads/train/*:job_workflow_ref:{PLATFORM_WORKFLOWS}/"
            f"gpu-runner-{job}.yml@{TRUSTED.commit}"
            for job in ("start", "stop")
        ],
        "sts.amazonaws.com",
        "does not trust repo:" + f"{OWNER}/{NAME}:ref:refs/heads/sweep/",
    ),
    # Issue 31: a stack from before the platform held the workflows (the project's own copies at the default
    # branch), and one whose platform commit is another than the pin (bootstrap not run after platform-update).
    "the project's own copies at the default branch": (
        [
            f"repo:{OWNER}/{NAME}:ref:refs/heads/{prefix}*:job_workflow_ref:{OWNER}/{NAME}/.github/workflows/"
            f"gpu-runner-{job}.yml@refs/heads/main"
            for prefix in ("train/", "sweep/")
            for job in ("start", "stop")
        ],
        "sts.amazonaws.com",
        f"does not trust repo:{OWNER}/{NAME}:ref:refs/heads/train/first:job_workflow_ref:{PLATFORM_WORKFLOWS}/",
    ),
    "the platform at any commit": (
        [
            f"repo:{OWNER}/{NAME}:ref:refs/heads/{prefix}*:job_workflow_ref:{PLATFORM_WORKFLOWS}/gpu-runner-{job}.yml@*"
            for prefix in ("train/", "sweep/")
            for job in ("start", "stop")
        ],
        "sts.amazonaws.com",
        "also trusts",
    ),
}
SWEEP_WORKFLOWS = f"{OWNER}/{NAME}/.github/workflows"
SWEEP_TRUST_FAULTS = {
    # Any workflow of a sweep branch (e.g. a train.yml or ci.yml the pusher wrote) could read and write the studies.
    "every workflow on the sweep branches": ([f"repo:{OWNER}/{NAME}:ref:refs/heads/sweep/*"], "also trusts"),
    # sweep.yml on any branch: a train branch's sweep.yml too.
    "sweep.yml on every branch": (
        [f"repo:{OWNER}/{NAME}:ref:refs/heads/*:job_workflow_ref:{SWEEP_WORKFLOWS}/sweep.yml@refs/heads/*"],
        "also trusts",
    ),
    "the train branches instead": (
        [
            f"repo:{OWNER}/{NAME}:ref:refs/heads/train/*:job_workflow_ref:{SWEEP_WORKFLOWS}/sweep.yml@refs/heads/train/*"
        ],
        "does not trust",
    ),
    "the default branch's sweep.yml only": (
        [
            f"repo:{OWNER}/{NAME}:ref:refs/heads/sweep/*:job_workflow_ref:{SWEEP_WORKFLOWS}/sweep.yml@refs/heads/main"
        ],
        "does not trust",
    ),
}


@pytest.mark.parametrize("fault", TRAIN_TRUST_FAULTS, ids=list(TRAIN_TRUST_FAULTS))
def test_train_role_trust_too_broad_or_too_narrow(world: World, fault: str) -> None:
    subjects, audience, says = TRAIN_TRUST_FAULTS[fault]
    stack_checks(world)
    world.target.outputs["TrainRoleArn"] = _role_with_trust(world, subjects, audience)
    outcome = one(run(world, [doctor_aws.check_role_trust]), "train role trust")
    assert not outcome.ok and says in outcome.found and "make bootstrap" in outcome.fix
    assert one(run(world, [doctor_aws.check_role_trust]), "reaper role trust").ok


@pytest.mark.parametrize("fault", SWEEP_TRUST_FAULTS, ids=list(SWEEP_TRUST_FAULTS))
def test_sweep_role_trust_too_broad_or_too_narrow(world: World, fault: str) -> None:
    subjects, says = SWEEP_TRUST_FAULTS[fault]
    stack_checks(world)
    world.target.outputs["SweepRoleArn"] = _role_with_trust(world, subjects)
    outcomes = run(world, [doctor_aws.check_role_trust])
    outcome = one(outcomes, "sweep role trust")
    assert not outcome.ok and says in outcome.found and "sweep branches sweep/*" in outcome.fix, outcome
    assert one(outcomes, "train role trust").ok and one(outcomes, "reaper role trust").ok


PREDICT_TRUST_FAULTS = {
    # (output, subjects, what the line says): each role of predict.yml trusting too much or too little.
    "predict role: every workflow on the default branch": (
        "PredictRoleArn", [f"repo:{OWNER}/{NAME}:ref:refs/heads/main:*"], "also trusts"),
    "predict role: predict.yml on every branch": (
        "PredictRoleArn",
        [f"repo:{OWNER}/{NAME}:ref:refs/heads/*:job_workflow_ref:{SWEEP_WORKFLOWS}/predict.yml@refs/heads/*"],
        "also trusts"),
    "predict role: the launch workflows instead": (
        "PredictRoleArn",
        [f"repo:{OWNER}/{NAME}:ref:refs/heads/main:job_workflow_ref:{SWEEP_WORKFLOWS}/gpu-runner-start.yml@refs/heads/main"],
        "does not trust"),
    "predict launch role: any branch calling start/stop": (
        "PredictLaunchRoleArn",
        [f"repo:{OWNER}/{NAME}:ref:refs/heads/*:job_workflow_ref:{PLATFORM_WORKFLOWS}/gpu-runner-{job}.yml@{TRUSTED.commit}"
         for job in ("start", "stop")],
        "also trusts"),
    "predict launch role: start only": (
        "PredictLaunchRoleArn",
        [f"repo:{OWNER}/{NAME}:ref:refs/heads/main:job_workflow_ref:{PLATFORM_WORKFLOWS}/gpu-runner-start.yml@{TRUSTED.commit}"],
        "does not trust"),
}  # fmt: skip


@pytest.mark.parametrize("fault", PREDICT_TRUST_FAULTS, ids=list(PREDICT_TRUST_FAULTS))
def test_predict_role_trusts_too_broad_or_too_narrow(world: World, fault: str) -> None:
    output, subjects, says = PREDICT_TRUST_FAULTS[fault]
    stack_checks(world)
    world.target.outputs[output] = _role_with_trust(world, subjects)
    outcomes = run(world, [doctor_aws.check_role_trust])
    check = {"PredictRoleArn": "predict role trust", "PredictLaunchRoleArn": "predict launch role trust"}[
        output
    ]
    outcome = one(outcomes, check)
    assert not outcome.ok and says in outcome.found and "make bootstrap" in outcome.fix, outcome
    others = {"train role trust", "reaper role trust", "sweep role trust", "predict role trust",
              "predict launch role trust", "promote role trust"} - {check}  # fmt: skip
    assert all(one(outcomes, name).ok for name in others)


PROMOTE_TRUST_FAULTS = {
    # Issue 30: promote.yml's role (the held-out set), trusting too much or too little.
    "every environment": (
        [f"repo:{OWNER}/{NAME}:environment:*:job_workflow_ref:{SWEEP_WORKFLOWS}/promote.yml@refs/heads/main"],
        "also trusts"),
    "promote.yml read at any branch": (
        [f"repo:{OWNER}/{NAME}:environment:production:job_workflow_ref:{SWEEP_WORKFLOWS}/promote.yml@refs/heads/*"],
        "also trusts"),
    "the ref instead of the environment (a job without environment:)": (
        [f"repo:{OWNER}/{NAME}:ref:refs/heads/main:job_workflow_ref:{SWEEP_WORKFLOWS}/promote.yml@refs/heads/main"],
        "does not trust"),
}  # fmt: skip


@pytest.mark.parametrize("fault", PROMOTE_TRUST_FAULTS, ids=list(PROMOTE_TRUST_FAULTS))
def test_promote_role_trusts_too_broad_or_too_narrow(world: World, fault: str) -> None:
    subjects, says = PROMOTE_TRUST_FAULTS[fault]
    stack_checks(world)
    world.target.outputs["PromoteRoleArn"] = _role_with_trust(world, subjects)
    outcome = one(run(world, [doctor_aws.check_role_trust]), "promote role trust")
    assert not outcome.ok and says in outcome.found and "make bootstrap" in outcome.fix, outcome


def test_reaper_role_trusting_the_train_branches_fails(world: World) -> None:
    stack_checks(world)
    world.target.outputs["ReaperRoleArn"] = _role_with_trust(world, [f"repo:{OWNER}/{NAME}:ref:refs/heads/*"])
    outcome = one(run(world, [doctor_aws.check_role_trust]), "reaper role trust")
    assert not outcome.ok and "also trusts" in outcome.found


def test_a_deleted_role_fails(world: World) -> None:
    stack_checks(world)
    world.target.outputs["TrainRoleArn"] = world.target.outputs["TrainRoleArn"] + "-gone"
    outcome = one(run(world, [doctor_aws.check_role_trust]), "train role trust")
    assert not outcome.ok and "does not exist" in outcome.found


def test_the_deployed_roles_trust_exactly_the_train_branches_and_main(world: World) -> None:
    stack_checks(world)
    outcomes = run(world, [doctor_aws.check_role_trust])
    assert (
        one(outcomes, "train role trust").ok and "branches train/*" in one(outcomes, "train role trust").found
    )
    assert one(outcomes, "reaper role trust").ok and "branch main" in one(outcomes, "reaper role trust").found
    sweep = one(outcomes, "sweep role trust")
    assert sweep.ok and "branches sweep/* (their sweep.yml)" in sweep.found, sweep
    assert "branches train/* and sweep/*" in one(outcomes, "train role trust").found
    assert "branch main (predict.yml)" in one(outcomes, "predict role trust").found
    promote = one(outcomes, "promote role trust")
    assert promote.ok and "environment production (promote.yml of branch main)" in promote.found, promote
    predict_launch = one(outcomes, "predict launch role trust")
    assert (
        predict_launch.ok
        and f"branch main (through {TRUSTED.repository}'s gpu-runner-start/stop.yml at {TRUSTED.commit[:12]})"
        in predict_launch.found
    )


def test_spot_role_missing(world: World) -> None:
    world.faults.fail(
        "iam", "GetRole", "NoSuchEntity", status=404, when=lambda p: p.get("RoleName") == doctor_aws.SPOT_ROLE
    )
    outcome = one(run(world, [doctor_aws.check_spot_role]), "spot service-linked role")
    assert not outcome.ok
    assert (
        outcome.fix
        == "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com (once per account)"
    )


def test_spot_role_present_or_not_needed(world: World) -> None:
    assert one(run(world, [doctor_aws.check_spot_role]), "spot service-linked role").ok
    world.target.settings = world.settings(use_spot=False)
    world.faults.fail("iam", "GetRole", "NoSuchEntity", status=404, times=-1)
    outcome = one(run(world, [doctor_aws.check_spot_role]), "spot service-linked role")
    assert outcome.ok and "use_spot: false" in outcome.found


def test_quotas_below_the_largest_type_fail(world: World) -> None:
    answer_quotas(world.faults, on_demand=4, spot=0)
    world.target.settings = world.settings(instance_types=["g4dn.xlarge", "g5.2xlarge"])  # 4 and 8 vCPUs
    outcomes = run(world, [doctor_aws.check_quotas])
    on_demand, spot = one(outcomes, "vCPU quota L-DB2E81BA"), one(outcomes, "vCPU quota L-3819A6DF")
    assert not on_demand.ok and "is 4 vCPUs, g5.2xlarge needs 8" in on_demand.found
    assert "--quota-code L-DB2E81BA --desired-value 8 --region ap-northeast-1" in on_demand.fix
    assert not spot.ok and "is 0 vCPUs" in spot.found


def test_an_unknown_gpu_type_is_named(world: World) -> None:
    world.target.settings = world.settings(instance_types=["g4dn.xlarge", "g5.xlargee"])
    outcome = one(run(world, [doctor_aws.check_quotas]), "vCPU quota")
    assert not outcome.ok and "do not exist: [g5.xlargee]" in outcome.found


def test_a_quota_without_an_applied_value_falls_back_to_the_default(world: World) -> None:
    """moto answers GetServiceQuota for ec2 with NoSuchResourceException, as AWS does when only the default
    exists; the default (GetAWSDefaultServiceQuota, not in moto) is answered through the hook: 0 in a new account."""
    world.faults.answer(
        "service-quotas", "GetAWSDefaultServiceQuota", quota_body("L-DB2E81BA", 0.0), times=-1
    )
    world.target.settings = world.settings(use_spot=False)
    outcome = one(run(world, [doctor_aws.check_quotas]), "vCPU quota L-DB2E81BA")
    assert not outcome.ok and "is 0 vCPUs, g4dn.xlarge needs 4" in outcome.found
    assert ("service-quotas", "GetServiceQuota") not in {(s, o) for s, o, _, _ in world.faults.injected}


def test_quotas_that_cover_the_largest_type_pass(world: World) -> None:
    answer_quotas(world.faults, on_demand=8, spot=8)
    world.target.settings = world.settings(instance_types=["g4dn.xlarge", "g5.xlarge", "p3.2xlarge"])
    outcomes = run(world, [doctor_aws.check_quotas])
    assert one(outcomes, "vCPU quota L-DB2E81BA").ok and one(outcomes, "vCPU quota L-3819A6DF").ok
    assert (
        "needs 4 (p3.2xlarge: other families' quotas are not checked)"
        in one(outcomes, "vCPU quota L-DB2E81BA").found
    )


def test_a_type_not_offered_in_the_region_fails(world: World) -> None:
    """g6.xlarge is not offered in eu-west-1 (issue 12 A.4; moto's offerings from AWS's data agree)."""
    world.target.settings = world.settings(region="eu-west-1", instance_types=["g4dn.xlarge", "g6.xlarge"])
    outcome = one(run(world, [doctor_aws.check_offerings]), "instance types offered")
    assert not outcome.ok and outcome.found == "g6.xlarge not offered in eu-west-1"


def test_a_type_not_offered_in_a_subnets_zone_fails(world: World) -> None:
    subnet = _subnet_in(world, "ap-northeast-1d")
    world.target.settings = world.settings(subnet_ids=[_subnet_in(world, "ap-northeast-1a"), subnet])
    outcome = one(run(world, [doctor_aws.check_offerings]), "instance types offered")
    assert not outcome.ok and outcome.found == f"not offered: g5.xlarge in ap-northeast-1d ({subnet})"


def test_types_offered_in_every_subnets_zone_pass(world: World) -> None:
    subnets = [_subnet_in(world, "ap-northeast-1a"), _subnet_in(world, "ap-northeast-1c")]
    world.target.settings = world.settings(subnet_ids=subnets)
    outcome = one(run(world, [doctor_aws.check_offerings]), "instance types offered")
    assert outcome.ok and "zones ap-northeast-1a, ap-northeast-1c" in outcome.found


def test_a_root_snapshot_larger_than_the_volume_fails(world: World) -> None:
    world.target.settings = world.settings(root_volume_gb=10)  # moto's Amazon Linux snapshot is 15 GB
    outcome = one(run(world, [doctor_aws.check_ami]), "AMI")
    assert (
        not outcome.ok and "root snapshot is 15 GB" in outcome.found and "root_volume_gb: 15" in outcome.fix
    )


def test_an_ami_parameter_that_does_not_resolve_fails(world: World) -> None:
    world.target.settings = world.settings(ami_parameter="/aws/service/no-such/ami-id")
    outcome = one(run(world, [doctor_aws.check_ami]), "AMI")
    assert not outcome.ok and "does not exist in ap-northeast-1" in outcome.found


def test_the_ami_resolves_and_fits(world: World) -> None:
    outcome = one(run(world, [doctor_aws.check_ami]), "AMI")
    assert outcome.ok and "root snapshot 15 GB fits root_volume_gb 100" in outcome.found


def test_a_group_with_an_inbound_rule_fails(world: World) -> None:
    ec2 = world.session.client("ec2", region_name=REGION)
    group = ec2.create_security_group(GroupName=f"open-{uuid.uuid4().hex[:6]}", Description="ssh open")[
        "GroupId"
    ]
    ec2.authorize_security_group_ingress(
        GroupId=group, IpProtocol="tcp", FromPort=22, ToPort=22, CidrIp="0.0.0.0/0"
    )
    world.target.settings = world.settings(security_group_ids=[group])
    outcome = one(run(world, [doctor_aws.check_security_groups]), "security group")
    assert not outcome.ok and f"{group} has inbound rules" in outcome.found


def test_no_group_configured_fails_naming_the_stacks_group(world: World) -> None:
    stack_checks(world)
    world.target.settings = world.settings(security_group_ids=[])
    outcome = one(run(world, [doctor_aws.check_security_groups]), "security group")
    assert not outcome.ok and world.deployed["outputs"]["RunnerSecurityGroupId"] in outcome.fix


def test_the_stacks_group_has_no_inbound_rule(world: World) -> None:
    assert one(run(world, [doctor_aws.check_security_groups]), "security group").ok


def test_a_missing_bucket_fails(world: World) -> None:
    stack_checks(world)
    world.target.outputs["BucketName"] = f"gone-{uuid.uuid4().hex[:10]}"
    outcome = one(run(world, [doctor_aws.check_bucket]), "bucket")
    assert not outcome.ok and "does not exist" in outcome.found


def test_the_bucket_exists(world: World) -> None:
    stack_checks(world)
    outcome = one(run(world, [doctor_aws.check_bucket]), "bucket")
    assert outcome.ok and world.deployed["bucket"] in outcome.found


@pytest.mark.parametrize("profile", ["", "no-such-profile"])
def test_a_missing_instance_profile_fails(world: World, profile: str) -> None:
    world.target.settings = world.settings(instance_profile=profile)
    outcome = one(run(world, [doctor_aws.check_instance_profile]), "instance profile")
    assert not outcome.ok and "instance_profile" in outcome.fix


def test_the_instance_profile_exists_with_its_role(world: World) -> None:
    outcome = one(run(world, [doctor_aws.check_instance_profile]), "instance profile")
    assert outcome.ok and "with role" in outcome.found


def test_an_app_with_administration_write_passes(world: World) -> None:
    world.target.env = app_env(world.github)
    outcome = one(run(world, [doctor_github.check_runner_credential]), "runner credential")
    assert outcome.ok and "grants Administration: write" in outcome.found
    installation = [c for c in world.github.calls if c.path == f"/repos/{DEFAULT_REPOSITORY}/installation"]
    assert installation and all(c.method == "GET" and c.status == 200 for c in installation)


def test_an_app_with_administration_read_fails(doctor_stack: dict[str, Any], spot_role: str, session: boto3.Session,
                                               faults: AwsFaults) -> None:  # fmt: skip
    with GitHubDouble(app_permissions={"administration": "read", "metadata": "read"}) as double:
        settings = settings_from_mapping(doctor_stack["raw"])
        target = Target(
            settings, DEFAULT_REPOSITORY, settings.train_branch_prefix, env=app_env(double), platform=TRUSTED
        )
        world = World(target, Aws(session), session, faults, double, doctor_stack)
        outcome = one(run(world, [doctor_github.check_runner_credential]), "runner credential")
    assert not outcome.ok and "grants Administration: read" in outcome.found
    assert "Administration: Read and write" in outcome.fix


def test_a_pat_that_lists_runners_passes_and_says_what_it_cannot_check(world: World) -> None:
    world.github.add_runner("gpu-runner-1-1")
    outcome = one(run(world, [doctor_github.check_runner_credential]), "runner credential")
    assert outcome.ok and "lists the 1 runner(s)" in outcome.found and "cannot be read back" in outcome.found


def test_a_classic_token_with_the_repo_scope_passes(world: World) -> None:
    world.github.classic_scopes[DEFAULT_TOKEN] = "repo, workflow"
    outcome = one(run(world, [doctor_github.check_runner_credential]), "runner credential")
    assert outcome.ok and "has the `repo` scope" in outcome.found


@pytest.mark.parametrize("fault", ["user is not an admin", "classic token without repo"])
def test_a_pat_that_can_never_create_runners_fails(world: World, fault: str) -> None:
    """Read-only evidence against write: the user's role (GET /repos permissions.admin) and classic scopes."""
    if fault == "user is not an admin":
        world.github.non_admin_tokens.add(DEFAULT_TOKEN)
    else:
        world.github.classic_scopes[DEFAULT_TOKEN] = "public_repo, read:org"
    outcome = one(run(world, [doctor_github.check_runner_credential]), "runner credential")
    assert not outcome.ok and (
        "not an admin" in outcome.found if "admin" in fault else "`repo`" in outcome.found
    )


@pytest.mark.parametrize("fault", ["none set", "revoked", "not installed"])
def test_a_runner_credential_that_cannot_list_runners_fails(world: World, fault: str) -> None:
    if fault == "none set":
        world.target.env = {k: v for k, v in world.target.env.items() if k != "GPU_RUNNER_TOKEN"}
    elif fault == "revoked":
        world.github.revoke(DEFAULT_TOKEN)
    else:
        world.target.repository = f"{OWNER}/not-installed"
    outcome = one(run(world, [doctor_github.check_runner_credential]), "runner credential")
    assert not outcome.ok and outcome.fix


SETTINGS_FAULTS = {
    "train role variable missing": (lambda d: d.variables[DEFAULT_REPOSITORY].pop("AWS_ROLE_ARN"), "gh variable set AWS_ROLE_ARN"),
    "sweep role variable missing": (lambda d: d.variables[DEFAULT_REPOSITORY].pop("AWS_SWEEP_ROLE_ARN"), "gh variable set AWS_SWEEP_ROLE_ARN"),
    "predict role variable missing": (lambda d: d.variables[DEFAULT_REPOSITORY].pop("AWS_PREDICT_ROLE_ARN"), "gh variable set AWS_PREDICT_ROLE_ARN"),
    "promote role variable missing": (lambda d: d.variables[DEFAULT_REPOSITORY].pop("AWS_PROMOTE_ROLE_ARN"), "gh variable set AWS_PROMOTE_ROLE_ARN"),
    "predict launch role of another stack": (
        lambda d: d.set_variable("AWS_PREDICT_LAUNCH_ROLE_ARN", "arn:aws:iam::123456789012:role/other"),
        "the stack's PredictLaunchRoleArn is",
    ),
    "role variable of another stack": (
        lambda d: d.set_variable("AWS_REAPER_ROLE_ARN", "arn:aws:iam::123456789012:role/other"),
        "the stack's ReaperRoleArn is",
    ),
    # Issue 13 item 2: a runner credential left as a repository secret is reachable from any branch.
    "runner token left as a secret": (lambda d: d.set_secret("GPU_RUNNER_TOKEN"), "gh secret delete GPU_RUNNER_TOKEN"),
    "app key left as a secret": (lambda d: d.set_secret("GPU_RUNNER_APP_PRIVATE_KEY"), "gh secret delete GPU_RUNNER_APP_PRIVATE_KEY"),
    "mlflow password as a variable": (
        lambda d: d.set_variable("MLFLOW_TRACKING_PASSWORD", "x"),
        "MLFLOW_TRACKING_PASSWORD is a variable, the workflows read it as a secret",
    ),
    "mlflow user without password": (lambda d: d.set_secret("MLFLOW_TRACKING_USERNAME"), "gh secret set MLFLOW_TRACKING_PASSWORD"),
}  # fmt: skip


@pytest.mark.parametrize("fault", SETTINGS_FAULTS, ids=list(SETTINGS_FAULTS))
def test_missing_or_misplaced_repository_settings_fail(world: World, fault: str) -> None:
    plant, says = SETTINGS_FAULTS[fault]
    plant(world.github)
    stack_checks(world)
    outcome = one(run(world, [doctor_github.check_repository_settings]), "repository variables and secrets")
    assert not outcome.ok and says in outcome.fix, outcome.line()


def test_the_batch_backend_needs_its_submit_role_variable(world: World) -> None:
    """backend: batch with no AWS_BATCH_ROLE_ARN: every train push would fail in batch.yml's credentials step."""
    stack_checks(world)
    world.target.settings = dataclasses.replace(world.target.settings, backend="batch")
    outcome = one(run(world, [doctor_github.check_repository_settings]), "repository variables and secrets")
    assert not outcome.ok and "gh variable set AWS_BATCH_ROLE_ARN" in outcome.fix, outcome.line()
    world.github.set_variable("AWS_BATCH_ROLE_ARN", "arn:aws:iam::123456789012:role/batch-submit")
    outcome = one(run(world, [doctor_github.check_repository_settings]), "repository variables and secrets")
    assert outcome.ok, outcome.line()


def test_a_pin_the_stack_does_not_trust_fails_until_bootstrap(world: World) -> None:
    """After `make platform-update` the workflows call the new commit: the stack still trusts the old one (here
    the pin moved, the stack did not), so every launch would be refused its credentials; doctor says bootstrap.
    The role checks name the subject the pin needs, which the old trust lacks."""
    world.target.platform = dataclasses.replace(TRUSTED, commit="1" * 40)
    outcomes = run(world, [doctor_aws.check_stack, doctor_aws.check_role_trust])
    outcome = one(outcomes, "platform trust")
    assert not outcome.ok and f"the launch roles trust {TEST_PLATFORM}, the project pins " in outcome.found
    assert outcome.fix.startswith("make bootstrap"), outcome.line()
    train = one(outcomes, "train role trust")
    assert not train.ok and f"gpu-runner-start.yml@{'1' * 40}" in train.found, train.line()


# A Batch stack as doctor reads it: only its parameters matter (the submit role's trust names the platform commit
# it was deployed with; tests/runner/test_batch_stack.py deploys the real one).
BATCH_STAND_IN = {
    "Parameters": {"PlatformRepository": {"Type": "String"}, "PlatformCommit": {"Type": "String"}},
    "Resources": {"Nothing": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
}


@pytest.mark.parametrize(
    ("batch_trusts", "says"),
    [
        (None, "does not exist"),
        (f"{TRUSTED.repository}@{'0' * 40}", "submit role trusts your-org/mlops-template@0000"),
        (TEST_PLATFORM, ""),
    ],
    ids=["no-batch-stack", "batch-stack-of-an-older-pin", "batch-stack-of-the-pin"],
)
def test_the_batch_backend_needs_its_stack_to_trust_the_pinned_platform(
    world: World, batch_trusts: str | None, says: str
) -> None:
    """backend: batch after `make platform-update` and `make bootstrap` but no `make batch-up`: the submit role
    still trusts batch.yml at the old commit and every Batch training would be refused its credentials."""
    world.target.settings = dataclasses.replace(world.target.settings, backend="batch")
    cfn = world.session.client("cloudformation", region_name=world.target.settings.region)
    name = batch_stack_name(world.target.settings.project, world.target.repository)
    if batch_trusts:
        repository, commit = batch_trusts.split("@")
        cfn.create_stack(StackName=name, TemplateBody=json.dumps(BATCH_STAND_IN), Parameters=[
            {"ParameterKey": "PlatformRepository", "ParameterValue": repository},
            {"ParameterKey": "PlatformCommit", "ParameterValue": commit},
        ])  # fmt: skip
    try:
        outcome = one(run(world, [doctor_aws.check_stack]), "platform trust")
    finally:
        if batch_trusts:
            cfn.delete_stack(StackName=name)
    if says:
        assert not outcome.ok and says in outcome.found and "make batch-up" in outcome.fix, outcome.line()
    else:
        assert outcome.ok, outcome.line()


@pytest.mark.parametrize("token", ["", DEFAULT_TOKEN])
def test_without_a_token_that_may_read_them_the_check_fails(world: World, token: str) -> None:
    """No GITHUB_TOKEN, or the runner PAT (Administration only: GitHub answers 403 for variables)."""
    world.target.env = {**world.target.env, "GITHUB_TOKEN": token}
    outcome = one(run(world, [doctor_github.check_repository_settings]), "repository variables and secrets")
    assert not outcome.ok and "GITHUB_TOKEN" in outcome.fix
    if token:
        assert "403" in outcome.found


# Issue 30: what every credential hangs on ("only the default branch's workflows"), and promote's human gate.
UNGUARDED = {
    # Medium 8: anyone who may push to the default branch owns the launch role, the GitHub credential, promotion.
    "no rule guards the default branch": (
        lambda s: s.rulesets.clear(), "default branch protection", "Require a pull request before merging"),
    # High 3: promote moves what predict.yml serves; without a reviewer one dispatch does it.
    "production without required reviewers": (
        lambda s: s.set_environment("production", branches=(("main", "branch"),)), "production environment",
        "Required reviewers"),
    # Low: a fork's pull request workflow can take the GPU runner's label before the train job does.
    "public, outside contributors run without approval": (
        lambda s: setattr(s, "public", True), "fork pull request approval", "all external contributors"),
}  # fmt: skip


@pytest.mark.parametrize("fault", UNGUARDED, ids=list(UNGUARDED))
def test_an_unguarded_default_branch_production_or_fork_policy_fails_doctor(world: World, fault: str) -> None:
    """The whole doctor on an otherwise healthy account: exactly one ✗, on the weakened guard, with its fix."""
    plant, check, fix = UNGUARDED[fault]
    plant(world.github.settings[DEFAULT_REPOSITORY])
    answer_quotas(world.faults, on_demand=8, spot=8)
    failed = [o for o in run(world) if not o.ok]
    assert [o.check for o in failed] == [check], [o.line() for o in failed]
    assert fix in failed[0].fix, failed[0].line()


def test_the_repository_settings_pass_and_are_paged(world: World) -> None:
    for index in range(35):  # more than one page of variables (at most 30 a page)
        world.github.set_variable(f"OTHER_{index:02d}", "x")
    stack_checks(world)
    outcome = one(run(world, [doctor_github.check_repository_settings]), "repository variables and secrets")
    assert outcome.ok and "AWS_ROLE_ARN" in outcome.found
    pages = [c for c in world.github.calls if c.path.endswith("/actions/variables")]
    assert len(pages) == 2


def test_mlflow_that_answers_passes(world: World, mlflow_server: str) -> None:
    world.target.env = {**world.target.env, "MLFLOW_TRACKING_URI": mlflow_server}
    outcome = one(run(world, [doctor_mlflow.check_mlflow]), "MLflow")
    assert outcome.ok and mlflow_server in outcome.found


def test_mlflow_from_the_repository_variable_that_does_not_answer_fails(world: World) -> None:
    with socket.socket() as sock:  # a port nobody listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    world.target.repo_variables = {"MLFLOW_TRACKING_URI": dead.replace("http://", "http://ml:s3cret@")}
    outcome = one(run(world, [doctor_mlflow.check_mlflow]), "MLflow")
    assert not outcome.ok and "unreachable" in outcome.found
    assert dead.replace("http://", "http://***@") in outcome.found and "s3cret" not in outcome.line()


def test_a_vpc_only_mlflow_server_is_not_asked_from_here(world: World) -> None:
    """The team MLflow server's TrackingUri (a private address) answers the GPU runners only: no request that
    could only time out, a line that says how to reach it. A loopback address is still asked. Without the tunnel
    role variable the hosted jobs could not reach it: that fails, with the fix."""
    world.target.repo_variables = {"MLFLOW_TRACKING_URI": "http://10.40.1.7:5000"}
    outcome = one(run(world, [doctor_mlflow.check_mlflow]), "MLflow")
    assert not outcome.ok and "MLFLOW_TUNNEL_ROLE_ARN is not set" in outcome.found
    assert "gh variable set MLFLOW_TUNNEL_ROLE_ARN" in outcome.fix
    world.target.repo_variables["MLFLOW_TUNNEL_ROLE_ARN"] = "arn:aws:iam::123456789012:role/tunnel"
    outcome = one(run(world, [doctor_mlflow.check_mlflow]), "MLflow")
    assert outcome.ok and "make mlflow-tunnel" in outcome.found and "through the SSM tunnel" in outcome.found
    assert [doctor_mlflow.vpc_only(u) for u in ("http://172.31.0.9:5000", "http://192.168.1.2", "http://127.0.0.1:5000",
            "https://mlflow.example.com", "http://8.8.8.8")] == [True, True, False, False, False]  # fmt: skip


@pytest.mark.parametrize(
    ("shell", "repository", "ok"),
    [("", "", True), ("sqlite:///mlflow.db", "", True), ("", "sqlite:///mlflow.db", False)],
    ids=["unset", "local store in this shell", "local store as the repository variable"],
)
def test_mlflow_unset_or_local_passes_and_a_local_store_for_the_gpu_job_fails(
    world: World, shell: str, repository: str, ok: bool
) -> None:
    world.target.env = {**world.target.env, "MLFLOW_TRACKING_URI": shell}
    world.target.repo_variables = {"MLFLOW_TRACKING_URI": repository} if repository else {}
    assert one(run(world, [doctor_mlflow.check_mlflow]), "MLflow").ok is ok


def test_iam_wildcards_are_iam_s_not_shell_globs() -> None:
    assert doctor_aws._iam_like("repo:o/r:ref:refs/heads/train/*", "repo:o/r:ref:refs/heads/train/a/b")
    assert doctor_aws._iam_like("repo:o/r?:*", "repo:o/rx:pull_request")
    assert not doctor_aws._iam_like("repo:o/[rx]:*", "repo:o/r:pull_request")  # brackets are literal in IAM
    assert not doctor_aws._iam_like("repo:o/r:ref:refs/heads/train/*", "repo:o/r:ref:refs/heads/main")


@pytest.fixture(scope="module")
def doctor_stack(tmp_path_factory: pytest.TempPathFactory, oidc_provider: str) -> dict[str, Any]:
    """`gpu-runner bootstrap` as manual/setup.md's `make bootstrap` runs it, then the settings wired as it prints."""
    raw = {
        "project": f"doctor-{uuid.uuid4().hex[:8]}",
        "region": REGION,
        "instance_types": ["g4dn.xlarge", "g5.xlarge"],
        "ami_parameter": PUBLIC_AMI_PARAMETER,
        "ssm_prefix": f"/gpu-runner/{DEFAULT_REPOSITORY}",
    }
    path = tmp_path_factory.mktemp("doctor") / "gpu-runner.yaml"
    path.write_text(yaml.safe_dump(raw))
    bucket = f"doctor-test-{uuid.uuid4().hex[:12]}"
    outputs = stack_deploy.bootstrap(
        path, project=raw["project"], region=REGION, repository=DEFAULT_REPOSITORY, bucket=bucket,
        oidc_provider=oidc_provider,
    ).outputs  # fmt: skip
    wired = {
        **raw,
        "instance_profile": outputs["RunnerInstanceProfile"],
        "security_group_ids": [outputs["RunnerSecurityGroupId"]],
    }
    return {"raw": wired, "outputs": outputs, "bucket": bucket, "oidc": oidc_provider}


@pytest.fixture(scope="module")
def spot_role(moto_endpoint: str) -> Iterator[str]:
    """The spot service-linked role under AWS's name and path (moto's create-service-linked-role misnames it).
    IAM is account-wide: the role is deleted again afterwards, because a spot launch in the same account needs an
    account without it (the first spot launch is what creates it)."""
    iam = boto3.Session(region_name=REGION).client("iam")
    created = False
    try:
        iam.get_role(RoleName=doctor_aws.SPOT_ROLE)
    except ClientError:
        created = True
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "spot.amazonaws.com"},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
        iam.create_role(
            RoleName=doctor_aws.SPOT_ROLE,
            Path="/aws-service-role/spot.amazonaws.com/",
            AssumeRolePolicyDocument=json.dumps(trust),
        )
    yield doctor_aws.SPOT_ROLE
    if created:
        iam.delete_role(RoleName=doctor_aws.SPOT_ROLE)


def quota_body(code: str, value: float) -> dict[str, Any]:
    return service_quotas.quota_body(code, value, REGION)


def answer_quotas(faults: AwsFaults, on_demand: float, spot: float) -> None:
    service_quotas.answer_quotas(faults, on_demand, spot, REGION)


@dataclasses.dataclass
class World:
    target: Target
    aws: Aws
    session: boto3.Session
    faults: AwsFaults
    github: GitHubDouble
    deployed: dict[str, Any]

    def settings(self, **changes: Any) -> Settings:
        return settings_from_mapping({**self.deployed["raw"], **changes})


def github_env(double: GitHubDouble, **extra: str) -> dict[str, str]:
    return {
        "GITHUB_API_URL": double.url,
        "GPU_RUNNER_TOKEN": DEFAULT_TOKEN,
        "GITHUB_TOKEN": ADMIN_TOKEN,
        **extra,
    }


@pytest.fixture
def world(
    doctor_stack: dict[str, Any],
    spot_role: str,
    session: boto3.Session,
    faults: AwsFaults,
    github_double: GitHubDouble,
) -> World:
    outputs = doctor_stack["outputs"]
    github_double.set_variable("AWS_ROLE_ARN", outputs["TrainRoleArn"])
    github_double.set_variable("AWS_REAPER_ROLE_ARN", outputs["ReaperRoleArn"])
    github_double.set_variable("AWS_SWEEP_ROLE_ARN", outputs["SweepRoleArn"])
    github_double.set_variable("AWS_PREDICT_ROLE_ARN", outputs["PredictRoleArn"])
    github_double.set_variable("AWS_PREDICT_LAUNCH_ROLE_ARN", outputs["PredictLaunchRoleArn"])
    github_double.set_variable("AWS_PROMOTE_ROLE_ARN", outputs["PromoteRoleArn"])
    setup_guards(
        github_double.settings[DEFAULT_REPOSITORY]
    )  # the default branch and production as setup.md says
    settings = settings_from_mapping(doctor_stack["raw"])
    target = Target(
        settings=settings,
        repository=DEFAULT_REPOSITORY,
        train_branch_prefix=settings.train_branch_prefix,
        env=github_env(github_double),
        platform=TRUSTED,
    )
    return World(target, Aws(session), session, faults, github_double, doctor_stack)


class CallRecorder:
    """Every AWS operation a run makes (botocore's before-call: after parameter validation, before sending)."""

    def __init__(self) -> None:
        self.operations: list[str] = []

    def __call__(self, model: Any, **_: Any) -> None:
        self.operations.append(f"{model.service_model.service_name}:{model.name}")


def check_name(check: doctor_checks.Check) -> str:
    """The name doctor gives a check's failure line (the CHECKS tables; check_identity runs first)."""
    table = [("AWS credentials", doctor_aws.check_identity), *doctor_aws.CHECKS, *doctor.GITHUB_CHECKS,
             *doctor_mlflow.CHECKS]  # fmt: skip
    return next((n for n, f in table if check in (f, getattr(f, "__wrapped__", None))), check.__name__)


def run(world: World, checks: list[doctor_checks.Check] | None = None) -> list[Outcome]:
    """The whole doctor (or only `checks`), asserting it stayed read-only on AWS and GitHub."""
    recorder = CallRecorder()
    world.session.events.register("before-call", recorder)
    world.github.clear_calls()
    runners_before = world.github.runners
    try:
        if checks is None:
            lines: list[str] = []
            outcomes = doctor.run_checks(world.target, world.aws, lines.append)
            assert lines[:-1] == [o.line() for o in outcomes]  # printed as found, one line each
        else:
            outcomes = [
                o
                for check in checks
                for o in doctor.guarded(check_name(check), lambda c=check: c(world.target, world.aws), REGION)
            ]
    finally:
        world.session.events.unregister("before-call", recorder)
    # The format: `✓ <check>: <found>`, or `✗`/`!` `<check>: <found>; fix: <fix>`, one line each.
    malformed = [
        o.line()
        for o in outcomes
        if not LINE.fullmatch(o.line()) or ("; fix: " in o.line()) == (o.ok and not o.warning)
    ]
    assert not malformed, malformed
    mutating = [op for op in recorder.operations if not READ_ONLY_OPERATION.fullmatch(op.split(":")[1])]
    assert not mutating, mutating
    writes = [c for c in world.github.calls if c.method != "GET" and not c.path.endswith("/access_tokens")]
    assert not writes, writes
    assert world.github.runners == runners_before  # nothing registered, nothing deleted
    assert not world.github.issued_jit_configs
    return outcomes


def one(outcomes: list[Outcome], check: str) -> Outcome:
    (found,) = [o for o in outcomes if o.check == check]
    return found


def stack_checks(world: World) -> None:
    """The checks that read the stack's outputs need the stack check to have run first."""
    run(world, [doctor_aws.check_stack])
    assert world.target.outputs


def _role_with_trust(world: World, subjects: list[str], audience: str | None = "sts.amazonaws.com") -> str:
    condition: dict[str, Any] = {"StringLike": {f"{OIDC_URL}:sub": subjects}}
    if audience:
        condition["StringEquals"] = {f"{OIDC_URL}:aud": audience}
    document = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Federated": world.deployed["oidc"]},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": condition,
            }
        ],
    }
    name = f"doctor-trust-{uuid.uuid4().hex[:8]}"
    role = world.session.client("iam").create_role(
        RoleName=name, AssumeRolePolicyDocument=json.dumps(document)
    )
    return role["Role"]["Arn"]


def _subnet_in(world: World, zone: str) -> str:
    ec2 = world.session.client("ec2", region_name=REGION)
    subnets = ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": [zone]}])["Subnets"]
    return subnets[0]["SubnetId"]


def app_env(double: GitHubDouble) -> dict[str, str]:
    env = github_env(
        double, GPU_RUNNER_APP_ID=str(DEFAULT_APP_ID), GPU_RUNNER_APP_PRIVATE_KEY=app_private_key_pem()
    )
    del env["GPU_RUNNER_TOKEN"]
    return env
