"""sweep.yml's collect job starts the next wave: one workflow_dispatch of sweep.yml on the branch, through the
GitHub double (held to GitHub's REST description), with the wave checked before any request."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_runner.cli import main
from gpu_runner_testing.github_double import DEFAULT_TOKEN, READ_ONLY_TOKEN


def next_wave(settings_file: Path, wave: str, sweep: str = "configs/sweep.yaml") -> list[str]:
    return ["--settings", str(settings_file), "next-wave", "--ref=sweep/lr", f"--wave={wave}", f"--sweep={sweep}",
            "--config=configs/train.yaml"]  # fmt: skip


@pytest.fixture
def in_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The collect job's working directory: the checkout, whose configs the dispatch names."""
    checkout = tmp_path / "checkout"
    (checkout / "configs").mkdir(parents=True)
    for name in ("sweep.yaml", "train.yaml"):
        (checkout / "configs" / name).write_text("{}\n")
    monkeypatch.chdir(checkout)
    return checkout


def test_the_next_wave_is_dispatched_on_the_sweep_branch(
    cli_env: Path, github_double, in_checkout: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", DEFAULT_TOKEN)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    assert main(next_wave(cli_env, "2")) == 0
    assert github_double.dispatches == [
        {
            "workflow": "sweep.yml",
            "ref": "sweep/lr",
            "inputs": {"sweep": "configs/sweep.yaml", "config": "configs/train.yaml", "wave": "3"},
        }
    ]
    assert "Started wave 3 of the sweep on sweep/lr" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("wave", ["", "0", "x", "1; touch pwned", "a[$(touch pwned)]", "1234567", "٣"])
def test_a_wave_that_is_not_a_number_sends_nothing(
    cli_env: Path, github_double, in_checkout: Path, monkeypatch: pytest.MonkeyPatch, capsys, wave: str
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", DEFAULT_TOKEN)
    assert main(next_wave(cli_env, wave)) == 1
    assert "--wave:" in capsys.readouterr().err
    assert github_double.calls == [] and github_double.dispatches == []
    assert not list(in_checkout.rglob("pwned"))


def test_a_sweep_file_outside_the_checkout_sends_nothing(
    cli_env: Path, github_double, in_checkout: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", DEFAULT_TOKEN)
    assert main(next_wave(cli_env, "1", sweep="../../etc/passwd")) == 1
    assert github_double.calls == []


def test_the_missing_permission_is_named(
    cli_env: Path, github_double, in_checkout: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    assert main(next_wave(cli_env, "1")) == 1
    assert "GITHUB_TOKEN is not set" in capsys.readouterr().err
    monkeypatch.setenv("GITHUB_TOKEN", READ_ONLY_TOKEN)
    assert main(next_wave(cli_env, "1")) == 1
    assert "actions: write" in capsys.readouterr().err
    assert github_double.dispatches == []
