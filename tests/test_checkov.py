"""checkov (an independent scanner, pinned in the template's dev group) on the workflows of a default bake and
a batch-backend bake, and on the platform's CloudFormation and reusable workflows: every check passes,
or is skipped in place (a resource's `Metadata.checkov`, a workflow's `# checkov:skip=` comment) with its
reason, and the skips are exactly the ones listed here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import bake_template, write_config
from cookiecutter.main import cookiecutter
from gpu_runner_testing.workflow_checks.workflow_files import offline_env

# One checkov run scans everything side by side, each in its own folder of the scanned root: the two bakes
# and the platform (its CloudFormation templates, package data of gpu_runner that a bake holds no copy of
# since issue 31, and its reusable workflows, which run for every project but live in this repository's
# .github). One run, not one per folder and bake: a checkov start costs about 9 s, and the seven runs there
# were took 105 s of the quick tier on CI's 2 cores.
BAKES = {"defaults": {}, "batch": {"gpu_backend": "batch"}}
PLATFORM = "platform"
# Paths inside a folder of the scanned root, as checkov names them (after the folder).
STACK = "/src/gpu_runner/setup/gpu-runner.yaml"
SERVER_STACK = "/src/gpu_runner/mlflow_server/mlflow-server.yaml"
BATCH_STACK = "/src/gpu_runner/batch/batch.yaml"
ROOT = Path(__file__).resolve().parents[1]
CHECKOV = Path(sys.executable).with_name("checkov")
FRAMEWORKS = ("cloudformation", "github_actions")
# workflow_dispatch inputs: the next attempt's dispatch (train.yml), a sweep's next wave, predict's model and
# files, promote's run; each input is checked before use (manual/security.md). Every bake skips them.
DISPATCH_SKIPS = {
    ("CKV_GHA_7", "/.github/workflows/train.yml", "on(Train on a GPU)"),
    ("CKV_GHA_7", "/.github/workflows/sweep.yml", "on(Hyperparameter sweep on GPUs)"),
    ("CKV_GHA_7", "/.github/workflows/predict.yml", "on(Batch prediction)"),
    ("CKV_GHA_7", "/.github/workflows/promote.yml", "on(Promote a model to champion)"),
}
# (check, folder, file, resource) of every in-place skip; its reason is on the skip itself, and
# test_every_skip_says_why holds it to a sentence. A new finding is fixed, or skipped in place and added here:
# never skipped by configuration.
EXPECTED_SKIPS = {
    # The reaper Lambda: scheduled, no payload, AWS APIs only (the stack's template says why at each skip).
    ("CKV_AWS_115", PLATFORM, STACK, "AWS::Lambda::Function.ReaperFunction"),
    ("CKV_AWS_116", PLATFORM, STACK, "AWS::Lambda::Function.ReaperFunction"),
    ("CKV_AWS_117", PLATFORM, STACK, "AWS::Lambda::Function.ReaperFunction"),
    ("CKV_AWS_173", PLATFORM, STACK, "AWS::Lambda::Function.ReaperFunction"),
    ("CKV_AWS_158", PLATFORM, STACK, "AWS::Logs::LogGroup.ReaperLogGroup"),
    ("CKV_AWS_18", PLATFORM, STACK, "AWS::S3::Bucket.Bucket"),
    # Session Manager's channel actions on the MLflow server define no resource type (the skip says so).
    ("CKV_AWS_111", PLATFORM, SERVER_STACK, "AWS::IAM::ManagedPolicy.ServerPolicy"),
    *((check, bake, path, resource) for bake in BAKES for check, path, resource in DISPATCH_SKIPS),
}
NO_REASON = "No comment provided"  # what checkov records for a skip without one


def checkov(directory: Path) -> dict[str, dict[str, Any]]:
    """checkov's JSON report per framework, offline: `--skip-download` (no policy metadata from Prisma Cloud)
    and every HTTP(S) request sent to a dead proxy (offline_env), so a scan that goes online fails instead."""
    proc = subprocess.run(
        [str(CHECKOV), "--directory", str(directory), "--framework", *FRAMEWORKS, "--output", "json",
         "--compact", "--skip-download"],
        cwd=directory, env=offline_env(), capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    # 0: nothing failed; 1: something failed; anything else (or no JSON) is a crash.
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    return {report["check_type"]: report for report in reports}


def bake(out: Path, **answers: Any) -> Path:
    return Path(
        cookiecutter(
            str(bake_template()), no_input=True, output_dir=str(out / "out"), extra_context=answers or None,
            config_file=str(write_config(out / "cookiecutter")),
        )
    )  # fmt: skip


@pytest.fixture(scope="module")
def scanned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("scanned")
    for name, answers in BAKES.items():
        project = bake(tmp_path_factory.mktemp(name), **answers)
        # Only in-place skips count: no checkov configuration file may switch a check off.
        assert not [*project.glob(".checkov.y*ml"), *project.glob(".bridgecrew.y*ml")]
        shutil.move(project, root / name)  # scanned where it lies beside the others, not copied
    # The platform's sources and workflows alone (the template holds unrendered Jinja, the platform a .venv).
    shutil.copytree(
        ROOT / "platform" / "src", root / PLATFORM / "src", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(ROOT / ".github", root / PLATFORM / ".github")
    return checkov(root)


def entries(reports: dict[str, dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [check for report in reports.values() for check in report["results"].get(kind, [])]


def where(check: dict[str, Any]) -> tuple[str, str]:
    """(folder of the scanned root, path inside it) of a check's file:
    '/defaults/.github/x.yml' -> ('defaults', '/.github/x.yml')."""
    folder, _, path = check["file_path"].lstrip("/").partition("/")
    return folder, f"/{path}"


def test_checkov_passes_or_skips_every_check(scanned: dict[str, Any]) -> None:
    assert set(scanned) == set(FRAMEWORKS), set(scanned)
    failed = [
        f"{c['check_id']} {c['resource']} {c['file_path']}:{c['file_line_range']} {c['check_name']}"
        for c in entries(scanned, "failed_checks")
    ]
    assert failed == [], "\n".join(failed)
    skipped = {(c["check_id"], *where(c), c["resource"]) for c in entries(scanned, "skipped_checks")}
    assert skipped == EXPECTED_SKIPS
    # What it scanned: the three stacks and every folder's workflows: hundreds of checks, not an empty folder.
    files = {where(c) for c in entries(scanned, "passed_checks")}
    assert {(PLATFORM, STACK), (PLATFORM, SERVER_STACK), (PLATFORM, BATCH_STACK)} <= files, files
    platform_workflows = ("gpu-runner-start.yml", "gpu-runner-stop.yml", "batch.yml")
    assert {(PLATFORM, f"/.github/workflows/{name}") for name in platform_workflows} <= files, files
    assert {(bake, "/.github/workflows/train.yml") for bake in BAKES} <= files, files
    assert all(report["summary"]["parsing_errors"] == 0 for report in scanned.values())


def test_every_skip_says_why(scanned: dict[str, Any]) -> None:
    for check in entries(scanned, "skipped_checks"):
        reason = check.get("check_result", {}).get("suppress_comment", NO_REASON)
        named = f"{check['check_id']} {check['resource']} {check['file_path']}"
        assert reason != NO_REASON and len(reason.split()) >= 8, (
            f"{named}: a skip needs its reason: {reason!r}"
        )


# A Lambda function with neither a reserved concurrency nor a dead-letter queue; one skip without a reason.
PLANTED = """\
AWSTemplateFormatVersion: "2010-09-09"
Resources:
  Planted:
    Type: AWS::Lambda::Function
    Metadata:
      checkov:
        skip:
          - id: CKV_AWS_116
    Properties:
      Runtime: python3.13
      Handler: index.handler
      Role: arn:aws:iam::123456789012:role/planted
      Code:
        ZipFile: "def handler(event, context): pass"
"""


def test_the_scan_catches_a_finding_and_a_skip_without_a_reason(tmp_path: Path) -> None:
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "planted.yaml").write_text(PLANTED, encoding="utf-8")
    reports = checkov(tmp_path)
    failed = {c["check_id"] for c in entries(reports, "failed_checks")}
    assert "CKV_AWS_115" in failed, failed
    (skip,) = [c for c in entries(reports, "skipped_checks") if c["check_id"] == "CKV_AWS_116"]
    assert skip["check_result"]["suppress_comment"] == NO_REASON
