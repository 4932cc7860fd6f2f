"""After a spot interruption: the decision (next attempt, circuit breaker, give up) and the workflow dispatch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpu_runner.cli import main
from gpu_runner.core.errors import SettingsError
from gpu_runner.core.settings import Settings
from gpu_runner.ec2_runner.resume import SPOT_RECLAIM, decide, interruption_reason
from gpu_runner_testing.github_double import DEFAULT_TOKEN, READ_ONLY_TOKEN

COMMIT = "c" * 40


def test_what_counts_as_an_interruption() -> None:
    assert "exit status 75" in interruption_reason(True, None)
    assert SPOT_RECLAIM in interruption_reason(False, {"StateReason": {"Code": SPOT_RECLAIM}})
    assert interruption_reason(False, {"StateReason": {"Code": "Client.UserInitiatedShutdown"}}) == ""
    assert interruption_reason(False, None) == ""


def test_attempts_then_on_demand_then_give_up(settings: Settings) -> None:
    settings = replace(settings, max_attempts=3, on_demand_after_interruptions=2)
    kwargs = {"reason": "reclaimed", "commit": COMMIT, "config": "configs/train.yaml"}
    first = decide(settings, attempt=1, **kwargs)
    assert first.next_inputs == {
        "attempt": "2",
        "commit": COMMIT,
        "config": "configs/train.yaml",
        "spot": "default",
    }
    second = decide(settings, attempt=2, instance_type="g5.xlarge", **kwargs)
    assert second.next_inputs is not None
    assert (second.next_inputs["spot"], second.next_inputs["instance-type"]) == ("false", "g5.xlarge")
    assert "circuit breaker" in second.reason
    third = decide(settings, attempt=3, **kwargs)
    assert third.interrupted and third.next_inputs is None and "giving up" in third.reason
    assert decide(settings, attempt=1, reason="", commit=COMMIT, config="x").interrupted is False


def test_settings_reject_bad_attempt_limits(settings: Settings) -> None:
    with pytest.raises(SettingsError, match="max_attempts: must be a positive integer"):
        replace(settings, max_attempts=0)


def resume_args(settings_file: Path, attempt: int, interrupted: str) -> list[str]:
    return ["--settings", str(settings_file), "resume", "--ref", "train/demo", "--attempt", str(attempt),
            "--train-interrupted", interrupted, "--commit", COMMIT, "--config", "configs/train.yaml"]  # fmt: skip


def test_cli_dispatches_the_next_attempt(
    cli_env: Path,
    github_double,
    aws,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", DEFAULT_TOKEN)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    assert main(resume_args(cli_env, 1, "true")) == 0
    assert github_double.dispatches == [
        {
            "workflow": "train.yml",
            "ref": "train/demo",
            "inputs": {"attempt": "2", "commit": COMMIT, "config": "configs/train.yaml", "spot": "default"},
        }
    ]
    assert (
        "Attempt 1: the training stopped on the spot interruption notice"
        in (tmp_path / "summary.md").read_text()
    )
    # Not interrupted (a failed or successful training): nothing is dispatched.
    assert main(resume_args(cli_env, 1, "false")) == 0
    assert len(github_double.dispatches) == 1


def test_cli_gives_up_after_max_attempts(cli_env: Path, github_double, aws, monkeypatch, capsys) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", DEFAULT_TOKEN)
    assert main(resume_args(cli_env, 3, "true")) == 1
    assert "max_attempts (3) reached" in capsys.readouterr().err
    assert github_double.dispatches == []


def test_cli_names_the_missing_permission(cli_env: Path, github_double, aws, monkeypatch, capsys) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    assert main(resume_args(cli_env, 1, "true")) == 1
    assert "GITHUB_TOKEN is not set" in capsys.readouterr().err
    monkeypatch.setenv("GITHUB_TOKEN", READ_ONLY_TOKEN)
    assert main(resume_args(cli_env, 1, "true")) == 1
    assert "permissions: actions: write" in capsys.readouterr().err
    assert github_double.dispatches == []


@pytest.mark.parametrize("attempt", [1, 3])  # 3: max_attempts, which in dispatch mode is an error (above)
def test_mode_none_reports_the_interruption_and_sends_no_request_to_github(
    cli_env: Path, github_double, aws, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, attempt: int
) -> None:
    """gpu-runner-stop.yml with `resume: none` (sweep.yml): the interruption is reported in the summary, and not
    one request reaches GitHub (no dispatch of train.yml): the sweep's collect job resumes the trial."""
    monkeypatch.setenv("GITHUB_TOKEN", DEFAULT_TOKEN)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    assert main([*resume_args(cli_env, attempt, "true"), "--mode=none"]) == 0
    assert github_double.calls == [] and github_double.dispatches == []
    summary = (tmp_path / "summary.md").read_text()
    assert (
        f"Attempt {attempt}: the training stopped on the spot interruption notice (exit status 75)."
        in summary
    )
    assert "Not dispatched (resume mode none)" in summary
    # The default is dispatch: the same call without --mode does start the next attempt.
    assert main(resume_args(cli_env, 1, "true")) == 0
    assert [d["inputs"]["attempt"] for d in github_double.dispatches] == ["2"]


def test_mode_none_needs_no_token_and_a_bad_mode_dispatches_nothing(
    cli_env: Path, github_double, aws, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    assert main([*resume_args(cli_env, 1, "true"), "--mode=none"]) == 0
    monkeypatch.setenv("GITHUB_TOKEN", DEFAULT_TOKEN)
    for bad in ("None", "", "dispatch ", "--x"):
        assert main([*resume_args(cli_env, 1, "true"), f"--mode={bad}"]) == 1
        assert "error: --mode: " in capsys.readouterr().err
    assert github_double.calls == []
