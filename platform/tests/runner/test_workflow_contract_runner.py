"""Values train.yml passes to `gpu-runner` (job outputs written on the GPU instance, dispatch inputs): every one
is checked and named when wrong, and a hostile one never stops the teardown (issue 13, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_runner.cli import main
from gpu_runner.core import workflow_contract as values
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.github_double import DEFAULT_TOKEN

COMMIT = "c" * 40
HOSTILE = "--x"


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (values.mlflow_run_id, "0123456789abcdef0123456789abcdef", ["--x", "0123456789ABCDEF0123456789ABCDEF", "a" * 31, "../" + "a" * 29, ""]),
        (values.commit, COMMIT, ["--x", "c" * 39, "c" * 41, "HEAD", "C" * 40, "c" * 39 + "\n"]),
        (values.instance_id, "i-0123456789abcdef0", ["--x", "i-1234567", "i-0123456789abcdef", "i-0123456789ABCDEF0", "ami-12345678"]),
        (values.region, "eu-west-1", ["--x", "eu-west", "EU-WEST-1", "eu-west-1; reboot"]),
    ],
)  # fmt: skip
def test_each_check_accepts_the_real_shape_and_refuses_the_rest(check, good: str, bad: list[str]) -> None:
    assert check(good) == good
    for value in bad:
        with pytest.raises(values.BadValue, match=r"^--[a-z-]+: "):
            check(value)


def test_numbers_are_checked_against_their_range() -> None:
    assert values.runner_id("42") == 42
    assert values.attempt("3", max_attempts=3) == 3
    for bad in ("0", "-1", "--x", "1.5", "", "٣"):  # "٣": an Arabic-Indic 3, which str.isdigit() accepts
        with pytest.raises(values.BadValue, match=r"^--runner-id: "):
            values.runner_id(bad)
    for bad in ("0", "4", "--x", "", "٣"):
        with pytest.raises(values.BadValue, match=r"^--attempt: .* from 1 to 3 \(max_attempts"):
            values.attempt(bad, max_attempts=3)


def test_config_must_stay_inside_the_repository(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "out").symlink_to("/etc")
    assert values.config_path("configs/train.yaml", tmp_path) == "configs/train.yaml"
    for bad in ("/etc/passwd", "../train.yaml", "configs/../../x.yaml", "configs/out/passwd", ""):
        with pytest.raises(values.BadValue, match=r"^--config: .* not a path inside the repository"):
            values.config_path(bad, tmp_path)


# ---------------------------------------------------------------------------------- the CLI as train.yml calls it
def _launch(cli_env: Path) -> dict[str, str]:
    assert main(["--settings", str(cli_env), "launch", "--spot=false"]) == 0
    return dict(line.split("=", 1) for line in (cli_env.parent / "out").read_text().splitlines())


def _teardown_args(cli_env: Path, out: dict[str, str], **overrides: str) -> list[str]:
    given = {"region": out["region"], "instance-id": out["instance-id"], "runner-id": out["runner-id"],
             "parameter": out["parameter"], "attempt": "1", **overrides}  # fmt: skip
    return ["--settings", str(cli_env), "teardown", *(f"--{flag}={value}" for flag, value in given.items())]


def _state(aws, instance_id: str) -> str:
    described = aws.client("ec2", REGION).describe_instances(InstanceIds=[instance_id])
    return described["Reservations"][0]["Instances"][0]["State"]["Name"]


def test_the_space_separated_form_lets_a_hostile_output_end_the_teardown(
    cli_env: Path, github_double
) -> None:
    """Why train.yml writes --opt=value: as `--mlflow-run-id --x`, argparse exits (2) before anything runs."""
    with pytest.raises(SystemExit) as info:
        main(
            [
                "--settings",
                str(cli_env),
                "teardown",
                "--instance-id",
                "i-0123456789abcdef0",
                "--mlflow-run-id",
                HOSTILE,
            ]
        )
    assert info.value.code == 2
    assert github_double.calls == []


def test_a_hostile_mlflow_run_id_skips_only_the_cost_logging(
    cli_env: Path, github_double, aws, capsys
) -> None:
    out = _launch(cli_env)
    assert main(_teardown_args(cli_env, out, **{"mlflow-run-id": HOSTILE})) == 0
    stdout = capsys.readouterr().out
    assert "warning: cost not logged to MLflow: --mlflow-run-id: '--x' is not an MLflow run id" in stdout
    assert github_double.runners == {}
    assert _state(aws, out["instance-id"]) in {"shutting-down", "terminated"}
    assert (
        "billed seconds: " in stdout
    )  # the attempt is still priced (job summary), only not logged to MLflow


@pytest.mark.parametrize("attempt", ["0", "4", HOSTILE, "two"])
def test_a_bad_attempt_skips_only_the_cost_logging(
    cli_env: Path, github_double, aws, capsys, attempt: str
) -> None:
    out = _launch(cli_env)
    assert main(_teardown_args(cli_env, out, attempt=attempt)) == 0
    assert (
        f"warning: cost not logged to MLflow: --attempt: {attempt!r} is not an attempt number from 1 to 3"
        in (capsys.readouterr().out)
    )
    assert github_double.runners == {}
    assert _state(aws, out["instance-id"]) in {"shutting-down", "terminated"}


def test_a_bad_region_falls_back_to_the_settings_region(cli_env: Path, github_double, aws, capsys) -> None:
    out = _launch(cli_env)
    assert main(_teardown_args(cli_env, out, region=HOSTILE)) == 0
    assert f"using the settings' region {REGION}" in capsys.readouterr().out
    assert _state(aws, out["instance-id"]) in {"shutting-down", "terminated"}
    assert github_double.runners == {}


def test_a_bad_runner_id_still_tears_everything_down_then_fails_naming_it(
    cli_env: Path, github_double, aws, capsys
) -> None:
    out = _launch(cli_env)
    assert main(_teardown_args(cli_env, out, **{"runner-id": HOSTILE})) == 1
    err = capsys.readouterr().err
    assert "error: not torn down: --runner-id: '--x' is not a runner id (a positive integer)" in err
    assert _state(aws, out["instance-id"]) in {"shutting-down", "terminated"}
    # The run's runner is found by its name (the run key), not by the id: deleted all the same.
    assert github_double.runners == {}


def test_a_bad_instance_id_still_tears_everything_down_then_fails_naming_it(
    cli_env: Path, github_double, aws, capsys
) -> None:
    out = _launch(cli_env)
    assert main(_teardown_args(cli_env, out, **{"instance-id": HOSTILE})) == 1
    assert "error: not torn down: --instance-id: '--x' is not an EC2 instance id" in capsys.readouterr().err
    assert github_double.runners == {}
    # The run's instance is found by its tags (the run key), not by the id: terminated all the same.
    assert _state(aws, out["instance-id"]) in {"shutting-down", "terminated"}
    # A re-run of the stop job with the real id finds everything gone.
    assert main(_teardown_args(cli_env, out)) == 0


def test_a_bad_parameter_is_refused_unprinted_and_the_runs_own_is_deleted(
    cli_env: Path, github_double, aws, capsys
) -> None:
    """The claim is printed back only once its shape is known: a newline in it cannot start a workflow command."""
    out = _launch(cli_env)
    assert main(_teardown_args(cli_env, out, parameter="/x\n::stop-commands::pwn")) == 1
    err = capsys.readouterr().err
    assert (
        "error: not torn down: --parameter: '/x\\n::stop-commands::pwn' is not an SSM parameter path" in err
    )
    assert "\n::" not in err
    names = {p["Name"] for p in aws.client("ssm", REGION).describe_parameters()["Parameters"]}
    assert out["parameter"] not in names


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--region=eu-west-1", "--instance-id=--x", "--runner-id=1"], "--instance-id: '--x' is not an EC2 instance id"),
        (["--region=eu-west-1", "--instance-id=i-0123456789abcdef0", "--runner-id=--x"], "--runner-id: '--x' is not a runner id"),
        (["--region=--x", "--instance-id=i-0123456789abcdef0", "--runner-id=1"], "--region: '--x' is not an AWS region"),
    ],
)  # fmt: skip
def test_wait_refuses_bad_values_before_any_call(
    cli_env: Path, github_double, capsys, flags, message
) -> None:
    assert main(["--settings", str(cli_env), "wait", *flags]) == 1
    assert message in capsys.readouterr().err
    assert github_double.calls == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--attempt=0"], "--attempt: '0' is not an attempt number from 1 to 3"),
        (["--attempt=4"], "--attempt: '4' is not an attempt number from 1 to 3"),
        (["--commit=HEAD~1"], "--commit: 'HEAD~1' is not a commit (40 lowercase hex digits)"),
    ],
)  # fmt: skip
def test_launch_refuses_bad_dispatch_inputs_before_any_call(
    cli_env: Path, github_double, capsys, flags, message
) -> None:
    assert main(["--settings", str(cli_env), "launch", *flags]) == 1
    assert message in capsys.readouterr().err
    assert github_double.calls == []


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--config=../../etc/passwd", "--config: '../../etc/passwd' is not a path inside the repository"),
        ("--commit=--x", "--commit: '--x' is not a commit"),
        ("--attempt=0", "--attempt: '0' is not an attempt number"),
        ("--instance-id=--x", "--instance-id: '--x' is not an EC2 instance id"),
    ],
)  # fmt: skip
def test_resume_refuses_bad_values_before_dispatching(
    cli_env: Path, github_double, aws, monkeypatch: pytest.MonkeyPatch, capsys, flag: str, message: str
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", DEFAULT_TOKEN)
    given = {"ref": "train/demo", "attempt": "1", "train-interrupted": "true", "commit": COMMIT,
             "config": "configs/train.yaml"}  # fmt: skip
    given[flag[2:].split("=")[0]] = flag.split("=", 1)[1]
    assert main(["--settings", str(cli_env), "resume", *(f"--{k}={v}" for k, v in given.items())]) == 1
    assert message in capsys.readouterr().err
    assert github_double.dispatches == []
