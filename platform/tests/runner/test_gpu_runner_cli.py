"""The `gpu-runner` command as the workflows call it: flags, settings file, env auth, $GITHUB_OUTPUT, exit codes."""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path

import boto3
import pytest
from mlflow.tracking import MlflowClient

from gpu_runner import cli
from gpu_runner.cli import main
from gpu_runner.core import log_output
from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.cost.pricing import load_table
from gpu_runner.setup.stack import StackInputs
from gpu_runner_testing.aws_constants import REGION


def read_outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_launch_then_teardown(cli_env: Path, github_double, aws, capsys) -> None:
    assert (
        main(["--settings", str(cli_env), "launch", "--instance-type", "g5.xlarge", "--spot", "false"]) == 0
    )
    out = read_outputs(cli_env.parent / "out")
    assert (out["label"][:-17], out["instance-type"], out["market"]) == (
        "gpu-runner-4321-2",
        "g5.xlarge",
        "on-demand",
    )
    assert not (cli_env.parent / "pwned").exists()
    args = ["--settings", str(cli_env), "teardown", "--region", out["region"], "--instance-id", out["instance-id"],
            "--runner-id", out["runner-id"], "--parameter", out["parameter"]]  # fmt: skip
    assert main(args) == 0
    assert "billed seconds: " in capsys.readouterr().out
    assert main(args) == 0  # idempotent
    assert github_double.runners == {}


def test_teardown_logs_the_cost_to_mlflow_and_the_job_summary(
    cli_env: Path, github_double, aws, mlflow_server: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """As the stop job runs it: the training run's id and the attempt; MLflow from the environment. moto has
    no Price List API, so the on-demand price comes from the bundled table, and says so."""
    client = MlflowClient(mlflow_server)
    run_id = client.create_run(client.create_experiment(f"cli-cost-{uuid.uuid4().hex[:8]}")).info.run_id
    client.log_metric(run_id, "training_seconds", 15.0, step=1)
    summary = cli_env.parent / "summary.md"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert (
        main(["--settings", str(cli_env), "launch", "--instance-type", "g5.xlarge", "--spot", "false"]) == 0
    )
    out = read_outputs(cli_env.parent / "out")
    args = ["--settings", str(cli_env), "teardown", "--region", out["region"], "--instance-id", out["instance-id"],
            "--runner-id", out["runner-id"], "--parameter", out["parameter"], "--mlflow-run-id", run_id,
            "--attempt", "1"]  # fmt: skip
    assert main(args) == 0
    stdout = capsys.readouterr().out
    line, *timeline = summary.read_text().splitlines()
    assert timeline[0].startswith("**Timeline (attempt 1)**, after launch: launched 0 s"), timeline
    table = load_table()
    price = table["regions"][REGION]["on_demand_usd_per_hour"]["g5.xlarge"]
    source = f"bundled-table-{table['as_of']}"
    assert line.startswith("**GPU cost (attempt 1)**: $") and " for g5.xlarge on-demand in " + REGION in line
    assert f"(60 s) at ${price}/h ({source})" in line and "overhead 45 s" in line, line
    assert line in stdout and f"cost logged to MLflow run {run_id} (attempt 1)" in stdout
    run = client.get_run(run_id)
    assert run.data.metrics["billed_seconds"] == 60 and run.data.metrics["overhead_seconds"] == 45
    assert run.data.tags["cost.price_source"] == run.data.tags["cost.on_demand_source"] == source
    assert run.data.tags["cost.market"] == "on-demand"


def test_teardown_with_a_bad_attempt_still_tears_down(cli_env: Path, github_double, aws, capsys) -> None:
    """A hand-made dispatch input is not a number: the instance is terminated all the same, cost not logged."""
    assert main(["--settings", str(cli_env), "launch", "--spot", "false"]) == 0
    out = read_outputs(cli_env.parent / "out")
    args = ["--settings", str(cli_env), "teardown", "--region", out["region"], "--instance-id", out["instance-id"],
            "--runner-id", out["runner-id"], "--parameter", out["parameter"], "--attempt", "two"]  # fmt: skip
    assert main(args) == 0
    stdout = capsys.readouterr().out
    assert "warning: cost not logged to MLflow: --attempt is not an attempt number" in stdout
    assert github_double.runners == {}
    state = aws.client("ec2", REGION).describe_instances(InstanceIds=[out["instance-id"]])
    assert state["Reservations"][0]["Instances"][0]["State"]["Name"] in {"shutting-down", "terminated"}


def test_bad_instance_type_override_is_rejected_before_any_call(cli_env: Path, github_double, capsys) -> None:
    assert main(["--settings", str(cli_env), "launch", "--instance-type", "g5.xlarge;reboot"]) == 1
    assert "instance_types: 'g5.xlarge;reboot' is not an instance type" in capsys.readouterr().err
    assert github_double.calls == []


@pytest.mark.parametrize(
    ("argv", "narrowed"),
    [
        (["launch", "--instance-type", "g5.xlarge"], {"instance_types": "g5.xlarge"}),
        (
            ["resume", "--ref", "train/x", "--commit", "c" * 40, "--instance-type", "g5.xlarge"],
            {"instance_types": "g5.xlarge"},
        ),
        # The server's own EC2 type: never the GPU types launch tries (t3.small passes their format check).
        (["mlflow-server", "up", "--repository", "octo-org/octo-repo", "--instance-type", "t3.small"], {}),
    ],
)
def test_only_a_gpu_commands_instance_type_narrows_the_settings(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], narrowed: dict[str, str]
) -> None:
    seen: list[dict[str, str]] = []

    def load(path: Path, overrides: dict[str, str] | None = None) -> None:
        seen.append(dict(overrides or {}))
        raise cli.RunnerError("stop after loading the settings")

    monkeypatch.setattr(cli, "load_settings", load)
    assert main(["--settings", str(cli_env), *argv]) == 1
    assert seen == [narrowed]


def test_workflow_settings_writes_the_settings_files_region_and_prefix_as_step_outputs(
    cli_env: Path, capsys
) -> None:
    """The start/stop/reap workflows read region and prefix from these outputs, before any credential exists
    (and sweep.yml's plan and collect jobs the bucket of the studies):
    the values are the settings file's (not bootstrap's or the code's defaults), one `key=value` line each."""
    settings = cli_env.read_text().replace(f"region: {REGION}\n", "region: eu-north-1\n")
    cli_env.write_text(
        settings + "train_branch_prefix: gpu/\nsweep_branch_prefix: hpo/\nmax_attempts: 5\nbackend: batch\n"
    )
    assert main(["--settings", str(cli_env), "workflow-settings"]) == 0
    outputs = cli_env.parent / "out"  # cli_env's GITHUB_OUTPUT
    assert read_outputs(outputs) == {
        "region": "eu-north-1", "train-branch-prefix": "gpu/", "sweep-branch-prefix": "hpo/",
        "bucket": "demo-bucket", "max-attempts": "5", "backend": "batch",
    }  # fmt: skip
    assert capsys.readouterr().out.splitlines() == [
        "region=eu-north-1", "train-branch-prefix=gpu/", "sweep-branch-prefix=hpo/", "bucket=demo-bucket",
        "max-attempts=5", "backend=batch",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("train", "sweep"),
    [("train/", "train/"), ("train/", "train/hpo/"), ("gpu/train/", "gpu/"), ("train/", "sweep dir/")],
    ids=["equal", "sweep-under-train", "train-under-sweep", "bad-character"],
)
def test_settings_refuse_a_sweep_prefix_that_overlaps_the_train_prefix(
    cli_env: Path, capsys, train: str, sweep: str
) -> None:
    """A branch under both prefixes would start train.yml and sweep.yml on one push: refused before anything
    reads the settings further (workflow-settings is the first step of every GPU workflow)."""
    cli_env.write_text(
        cli_env.read_text() + f"train_branch_prefix: {train}\nsweep_branch_prefix: '{sweep}'\n"
    )
    assert main(["--settings", str(cli_env), "workflow-settings"]) != 0
    err = capsys.readouterr().err
    assert f"sweep_branch_prefix: '{sweep}'" in err, err
    assert ("overlaps train_branch_prefix" in err) is (sweep != "sweep dir/"), err
    assert not (cli_env.parent / "out").exists(), "no output written from refused settings"


def test_settings_accept_sibling_prefixes(cli_env: Path) -> None:
    cli_env.write_text(
        cli_env.read_text() + "train_branch_prefix: gpu/train/\nsweep_branch_prefix: gpu/sweep/\n"
    )
    assert main(["--settings", str(cli_env), "workflow-settings"]) == 0
    assert read_outputs(cli_env.parent / "out")["sweep-branch-prefix"] == "gpu/sweep/"


def test_bootstrap_refuses_a_bucket_that_differs_from_the_settings(cli_env: Path, capsys) -> None:
    """The settings file is the bucket's one source (train.yml checkpoints to the bucket launch reads there)."""
    argv = ["--settings", str(cli_env), "bootstrap", "--repository", "o/r", "--bucket", "other-bucket"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert (
        f"--bucket: 'other-bucket' differs from bucket: 'demo-bucket' in {cli_env}, which the workflows read; "
        "change bucket there and leave --bucket out"
    ) in err, err


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        (
            "your-org/mlops-template@main",
            "--platform: 'your-org/mlops-template@main' is not <owner>/<template>@<commit>",
        ),
        ("your-org/mlops-template@" + "A" * 40, "with a full commit SHA (40 lowercase hex digits)"),
        ("mlops-template@" + "a" * 40, "--platform: 'mlops-template@"),
        # Not given, and no pin where bootstrap runs (the template repository's root, say).
        ("", "--platform: not given, and "),
    ],
    ids=["a-branch", "upper-case-hex", "no-owner", "no-pin-here"],
)
def test_bootstrap_refuses_a_platform_it_cannot_trust_before_any_aws_call(
    cli_env: Path, platform: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The launch roles trust the platform's workflows at one commit: a branch or tag would let whoever moves it
    choose what gets the role, so bootstrap takes a full SHA or the project's pin, and names the fix."""
    monkeypatch.chdir(tmp_path)  # no pyproject.toml here
    session = boto3.Session(region_name=REGION)
    sent: list[str] = []
    session.events.register("before-send", lambda **kwargs: sent.append(kwargs.get("event_name", "")))
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    given = ["--platform", platform] if platform else []
    assert main(["--settings", str(cli_env), "bootstrap", "--repository", "o/r", *given]) == 1
    err = capsys.readouterr().err
    assert expected in err, err
    assert sent == []
    assert (
        "leave it out to read the pin in pyproject.toml" in err
        or "pass --platform <owner>/<template>@<commit>" in err
    )


@pytest.mark.parametrize(
    ("repository", "commit"),
    [
        ("", ""),
        ("your-org/mlops-template", "main"),
        ("your-org/mlops-template", "a" * 39),
        ("-org/mlops-template", "a" * 40),
        ("your-org/mlops-template*", "a" * 40),
    ],
    ids=["none", "a-branch", "short-sha", "owner-with-leading-dash", "wildcard"],
)
def test_the_stack_inputs_refuse_a_platform_the_trust_could_not_name_exactly(
    repository: str, commit: str
) -> None:
    """What bootstrap deploys names the platform's workflows in the launch roles' trust: one repository and one
    full SHA, nothing a `*` in StringLike could widen (the same patterns as the stack parameters')."""
    with pytest.raises(RunnerError, match=re.escape(f"--platform: '{repository}@{commit}' is not")):
        StackInputs(
            repository="o/r", bucket="good-bucket", train_branch_prefix="train/", sweep_branch_prefix="sweep/",
            platform_repository=repository, platform_commit=commit,
        )  # fmt: skip


def test_launch_refuses_an_empty_bucket_before_any_aws_call(
    cli_env: Path, github_double, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    cli_env.write_text(cli_env.read_text().replace("bucket: demo-bucket\n", "bucket: ''\n"))
    # As in the workflow: no credential in the environment, so launch would read it from SSM first.
    monkeypatch.delenv("GPU_RUNNER_TOKEN")
    session = boto3.Session(region_name=REGION)
    sent: list[str] = []
    session.events.register("before-send", lambda **kwargs: sent.append(kwargs.get("event_name", "")))
    monkeypatch.setattr(cli, "Aws", lambda: Aws(session))
    assert main(["--settings", str(cli_env), "launch"]) == 1
    err = capsys.readouterr().err
    assert f"bucket: not set in {cli_env}; set it to the bucket `make bootstrap` created" in err, err
    assert sent == []
    assert github_double.calls == []


def test_unknown_settings_key_is_named(cli_env: Path, capsys) -> None:
    cli_env.write_text(cli_env.read_text() + "instance_typo: x\n")
    assert main(["--settings", str(cli_env), "reap"]) == 1
    assert "unknown key(s) instance_typo" in capsys.readouterr().err


def test_missing_credentials_say_which_variables(
    cli_env: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.delenv("GPU_RUNNER_TOKEN")
    assert main(["--settings", str(cli_env), "reap"]) == 1
    err = capsys.readouterr().err
    assert "GPU_RUNNER_TOKEN" in err and "GPU_RUNNER_APP_ID" in err


def test_bad_boolean_flag(cli_env: Path, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--settings", str(cli_env), "launch", "--spot", "maybe"])
    assert info.value.code == 2
    assert "'maybe' is not a boolean" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("AuthFailure", 401, "AWS refused DescribeInstances: AuthFailure: AWS rejected the credentials (expired or unknown)"),
        ("UnauthorizedOperation", 403, "AWS refused DescribeInstances: UnauthorizedOperation: injected UnauthorizedOperation (the roles' permissions are in gpu_runner/setup/gpu-runner.yaml"),
    ],
)  # fmt: skip
def test_aws_refusals_outside_launch_are_one_line(
    cli_env: Path, aws, faults, monkeypatch: pytest.MonkeyPatch, capsys, code: str, status: int, expected: str
) -> None:
    """reap (and resume) call AWS without launch's own error handling: still one line naming the call, no traceback."""
    monkeypatch.setattr("gpu_runner.cli.Aws", lambda: aws)
    faults.fail("ec2", "DescribeInstances", code, status=status)
    assert main(["--settings", str(cli_env), "reap"]) == 1
    err = capsys.readouterr().err
    assert expected in err, err
    assert "Traceback" not in err


def test_log_lines_reach_stdout_as_the_prints_they_replaced(capsys) -> None:
    """What the workflows' step logs show: the message alone on stdout, once however often main() ran; the
    GitHub client's INFO lines stay hidden, as they were before any logging was configured."""
    log_output.to_stdout()
    log_output.to_stdout()
    handlers = logging.getLogger("gpu_runner").handlers
    assert len([handler for handler in handlers if isinstance(handler, log_output.PrintHandler)]) == 1
    logging.getLogger("gpu_runner.ec2_runner.lifecycle").info("billed seconds: 60")
    logging.getLogger("gpu_runner.core.github").info("deleted runner 7")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("billed seconds: 60\n", "")
