"""Region, bucket, SSM prefix and the train and sweep branch prefixes are written once: configs/gpu-runner.yaml.
The workflows read them from the default branch's copy at run time (`gpu-runner workflow-settings`, the start job's
outputs), `make bootstrap` and `make doctor` through `--settings`; the one repetition GitHub forces is train.yml's
and sweep.yml's `on.push.branches` (triggers are read before any code runs), which must then say the same.

Where a value could be written: the files that deploy and run the project (workflows, composite actions,
Makefile, configs/, the CloudFormation templates gpu_runner ships). The platform's start and stop workflows are
no file of the project: they read the settings' outputs as reap.yml does (checked below in the pinned tree). Code, tests and docs may name example values (e.g. "a region like eu-west-1").
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from gpu_runner_testing.platform_tree import platform_tree

PROJECT = Path(__file__).resolve().parents[1]
SETTINGS = Path("configs") / "gpu-runner.yaml"
TRAIN = Path(".github") / "workflows" / "train.yml"
SWEEP = Path(".github") / "workflows" / "sweep.yml"
# The settings keys that are written once, with where a workflow takes each from instead.
ONE_SOURCE_KEYS = ("region", "bucket", "ssm_prefix", "train_branch_prefix", "sweep_branch_prefix")
{% raw %}# What the workflows read instead (the settings step's output; the start job's outputs in train.yml).
SETTINGS_REGION = "${{ steps.settings.outputs.region }}"
START_REGION = "${{ needs.start.outputs.region }}"
START_BUCKET = "${{ needs.start.outputs.bucket }}"{% endraw %}


def deployment_files(root: Path) -> list[Path]:
    """The files a value of the settings could be restated in (relative to root)."""
    patterns = (
        ".github/**/*.yml",
        ".github/**/*.yaml",
        "Makefile",
        "configs/*",
    )
    return sorted({p.relative_to(root) for pattern in patterns for p in root.glob(pattern) if p.is_file()})


def places(root: Path, value: str) -> set[str]:
    """Every deployment file that holds `value` as a whole word (not inside a longer name)."""
    word = re.compile(rf"(?<![\w.-]){re.escape(value)}(?![\w.-])")
    return {str(p) for p in deployment_files(root) if word.search((root / p).read_text(encoding="utf-8"))}


def settings(root: Path) -> dict[str, str]:
    raw = yaml.safe_load((root / SETTINGS).read_text(encoding="utf-8"))
    return {key: raw[key] for key in ONE_SOURCE_KEYS}


def restated(root: Path) -> dict[str, set[str]]:
    """Per one-source key, the files besides configs/gpu-runner.yaml that write its value (train.yml's and
    sweep.yml's triggers for the branch prefixes are checked on their own, by the trigger tests below)."""
    allowed = {"train_branch_prefix": {str(TRAIN)}, "sweep_branch_prefix": {str(SWEEP)}}
    return {
        key: places(root, value) - {str(SETTINGS)} - allowed.get(key, set())
        for key, value in settings(root).items()
    }


def test_each_value_is_written_once_in_the_settings() -> None:
    assert all(settings(PROJECT).values()), settings(PROJECT)
    for key, value in settings(PROJECT).items():
        assert str(SETTINGS) in places(PROJECT, value), (key, value)
    assert restated(PROJECT) == {key: set() for key in ONE_SOURCE_KEYS}


def test_the_trigger_is_the_configured_prefix() -> None:
    doc = yaml.safe_load((PROJECT / TRAIN).read_text(encoding="utf-8"))
    assert doc[True]["push"]["branches"] == [settings(PROJECT)["train_branch_prefix"] + "**"]


# sweep.yml is written in a later step of issue 15: until it exists there is no trigger to compare, and this test
# is skipped for exactly that reason (never for another: once the file exists, it must hold the settings' prefix).
@pytest.mark.skipif(not (PROJECT / SWEEP).exists(), reason=f"{SWEEP} does not exist yet (issue 15)")
def test_the_sweep_trigger_is_the_configured_prefix() -> None:
    doc = yaml.safe_load((PROJECT / SWEEP).read_text(encoding="utf-8"))
    assert doc[True]["push"]["branches"] == [settings(PROJECT)["sweep_branch_prefix"] + "**"]


def test_the_workflows_read_the_region_and_bucket_from_the_settings_outputs() -> None:
    """Where each GPU workflow takes the values at run time: the default branch's settings, through outputs."""
    # start and stop are the platform's, at the commit the project pins (its tree as the tests keep it).
    platform = platform_tree(PROJECT, PROJECT / ".e2e-cache") / ".github" / "workflows"
    for path in (
        platform / "gpu-runner-start.yml",
        platform / "gpu-runner-stop.yml",
        PROJECT / ".github" / "workflows" / "reap.yml",
    ):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        (job,) = doc["jobs"].values()
        credentials = [s for s in job["steps"] if str(s.get("uses", "")).startswith("aws-actions/")]
        # The job's role and, in stop, the MLflow tunnel role's (the platform's tunnel action written out).
        assert credentials and {s["with"]["aws-region"] for s in credentials} == {SETTINGS_REGION}
    train = yaml.safe_load((PROJECT / TRAIN).read_text(encoding="utf-8"))["jobs"]["train"]
    env = next(s for s in train["steps"] if s.get("id") == "train")["env"]
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == START_REGION
    assert env["BUCKET"] == START_BUCKET


@pytest.mark.parametrize(
    ("key", "path", "old", "new"),
    [
        ("region", ".github/workflows/reap.yml", f"aws-region: {SETTINGS_REGION}", "aws-region: {value}"),
        ("bucket", "Makefile", "bootstrap \\", "bootstrap --bucket {value} \\"),
        ("train_branch_prefix", ".github/workflows/predict.yml", "\njobs:\n", "\nenv:\n  TRAIN_PREFIX: refs/heads/{value}\njobs:\n"),
        ("sweep_branch_prefix", ".github/workflows/sweep-trial.yml", "\njobs:\n", "\nenv:\n  SWEEP_PREFIX: refs/heads/{value}\njobs:\n"),
    ],
)  # fmt: skip
def test_a_planted_second_copy_fails(tmp_path: Path, key: str, path: str, old: str, new: str) -> None:
    for relative in [*deployment_files(PROJECT)]:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROJECT / relative, tmp_path / relative)
    text = (tmp_path / path).read_text(encoding="utf-8")
    assert old in text, f"{path} no longer holds {old!r}: update the planted copy"
    (tmp_path / path).write_text(
        text.replace(old, new.format(value=settings(PROJECT)[key]), 1), encoding="utf-8"
    )
    assert restated(tmp_path)[key] == {path}
