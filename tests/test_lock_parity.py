"""The platform's own test environment (platform/uv.lock) runs on the versions a generated project locks:
every package both locks hold is at the project's version (scripts/lock_parity.py; `make relock` aligns
them)."""

from __future__ import annotations

from pathlib import Path

from lock_parity import lock_drift, locked_versions

ROOT = Path(__file__).resolve().parents[1]
PLATFORM_LOCK = ROOT / "platform" / "uv.lock"
PROJECT_LOCK = ROOT / "{{cookiecutter.project_slug}}" / "uv.lock"


def test_the_platforms_lock_holds_the_projects_versions() -> None:
    platform, project = PLATFORM_LOCK.read_text(), PROJECT_LOCK.read_text()
    assert lock_drift(platform, project) == {}, "run `make relock`"
    shared = set(locked_versions(platform)) & set(locked_versions(project))
    # The packages the doubles and the platform's tests stand on are among those compared.
    assert {"boto3", "botocore", "moto", "mlflow", "awscli", "cfn-lint", "pytest"} <= shared, shared


def test_a_version_the_project_does_not_lock_is_named() -> None:
    platform = (
        '[[package]]\nname = "boto3"\nversion = "1.44.18"\n\n[[package]]\nname = "only-here"\nversion = "1"\n'
    )
    project = (
        '[[package]]\nname = "boto3"\nversion = "1.44.8"\n\n'
        '[[package]]\nname = "soupsieve"\nversion = "2.10"\n\n'
        '[[package]]\nname = "soupsieve"\nversion = "4.1.4"\n'
    )
    assert lock_drift(platform, project) == {"boto3": ("1.44.18", ["1.44.8"])}
    assert lock_drift(project.replace("4.1.4", "9"), project) == {"soupsieve": ("9", ["2.10", "4.1.4"])}
