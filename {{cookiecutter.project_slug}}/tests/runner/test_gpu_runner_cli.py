"""The `gpu-runner` command as the workflows call it: flags, settings file, env auth, $GITHUB_OUTPUT, exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_runner.cli import main


def read_outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_launch_then_teardown(cli_env: Path, github_double, aws, capsys) -> None:
    assert (
        main(["--settings", str(cli_env), "launch", "--instance-type", "g5.xlarge", "--spot", "false"]) == 0
    )
    out = read_outputs(cli_env.parent / "out")
    assert (out["label"], out["instance-type"], out["market"]) == (
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


def test_bad_instance_type_override_is_rejected_before_any_call(cli_env: Path, github_double, capsys) -> None:
    assert main(["--settings", str(cli_env), "launch", "--instance-type", "g5.xlarge;reboot"]) == 1
    assert "instance_types: 'g5.xlarge;reboot' is not an instance type" in capsys.readouterr().err
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
