"""Every `gpu-runner` command of the Makefile, as a person runs it (extra flags empty), parsed by the pinned
platform's own CLI parser: the README's commands stay ones the CLI accepts, with this project's settings file,
repository and default branch. What each command then does is the platform's test (template repository,
`platform/tests/runner/`: bootstrap and batch up/down deployed to moto, doctor against the deployed stack)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from doubles.makefile import make_command
from project_package import PROJECT_DIR

from gpu_runner import cli
from gpu_runner.batch import TEMPLATE as BATCH_TEMPLATE
from gpu_runner.core.settings import load_settings
from gpu_runner.pin.project_pin import trusted_platform

MAKEFILE = PROJECT_DIR / "Makefile"
ANSWERS = json.loads((PROJECT_DIR / ".cookiecutter.json").read_text(encoding="utf-8"))["cookiecutter"]
REPOSITORY = f"{ANSWERS['github_owner']}/{ANSWERS['github_repo']}"
SETTINGS = Path("configs/gpu-runner.yaml")

# target -> (command, action or None, what its parsed flags must be)
TARGETS: dict[str, tuple[str, str | None, dict[str, object]]] = {
    # bootstrap and doctor read the platform commit from pyproject.toml's pin (no --platform).
    "bootstrap": ("bootstrap", None, {"repository": REPOSITORY, "default_branch": ANSWERS["default_branch"], "platform": ""}),
    "doctor": ("doctor", None, {"repository": REPOSITORY, "default_branch": ANSWERS["default_branch"], "platform": ""}),
    "mlflow-server-up": ("mlflow-server", "up", {"repository": REPOSITORY}),
    "mlflow-server-down": ("mlflow-server", "down", {"repository": REPOSITORY}),
    "mlflow-tunnel": ("mlflow-server", "tunnel", {"repository": REPOSITORY}),
    "batch-up": ("batch", "up", {"repository": REPOSITORY, "template": BATCH_TEMPLATE}),
    "batch-down": ("batch", "down", {"repository": REPOSITORY}),
    "mlflow-server-requirements": ("mlflow-server", "requirements", {"lock": Path("uv.lock"), "extra": ["cpu"], "uv": "uv"}),
    "cost-report": ("cost-report", None, {"days": 30}),
    "platform-update": ("platform-update", None, {"to": "", "uv": "uv"}),
}  # fmt: skip


def gpu_runner_argv(target: str) -> list[str]:
    words = make_command(MAKEFILE, target)
    return words[words.index("gpu-runner") + 1 :]


def test_every_gpu_runner_target_is_in_the_table() -> None:
    """A new target that runs gpu-runner is parsed here too (the table is not a sample)."""
    recipes = re.findall(r"^([a-z-]+):.*\n((?:\t.*\n)+)", MAKEFILE.read_text(), flags=re.MULTILINE)
    running = {target for target, recipe in recipes if re.search(r"\sgpu-runner\s", recipe)}
    assert running == set(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_the_target_is_a_command_the_cli_accepts(target: str) -> None:
    command, action, flags = TARGETS[target]
    args = cli.parser().parse_args(gpu_runner_argv(target))
    assert (args.command, getattr(args, "action", None)) == (command, action)
    assert {name: getattr(args, name) for name in flags} == flags
    assert args.settings == SETTINGS and (PROJECT_DIR / SETTINGS).is_file()
    if "template" in flags:
        assert BATCH_TEMPLATE.is_file()


def test_make_bootstrap_passes_the_bucket_and_branches_the_workflows_use() -> None:
    """The bucket, branch prefix and default branch `make bootstrap` deploys are the ones train.yml uses (bucket and
    prefix: the settings file's, the one source that launch hands on to the train job as the start job's `bucket`
    output), and the platform commit its roles trust is the one train.yml calls start and stop at."""
    args = cli.parser().parse_args(gpu_runner_argv("bootstrap"))
    # So bootstrap takes them from the settings.
    assert (args.bucket, args.branch_prefix, args.sweep_branch_prefix) == ("", "", "")
    settings = load_settings(PROJECT_DIR / args.settings)
    workflow = yaml.safe_load((PROJECT_DIR / ".github" / "workflows" / "train.yml").read_text())
    (train_step,) = [step for step in workflow["jobs"]["train"]["steps"] if step.get("id") == "train"]
    start_bucket = "$" + "{" * 2 + " needs.start.outputs.bucket " + "}" * 2  # verbatim file: no Jinja braces
    assert settings.bucket and train_step["env"]["BUCKET"] == start_bucket
    assert 'CHECKPOINT_URI="s3://${BUCKET}/checkpoints"' in train_step["run"]
    assert workflow[True]["push"]["branches"] == [f"{settings.train_branch_prefix}**"]
    # No --platform: bootstrap reads the pin in pyproject.toml (make runs it in the project's root).
    pin = trusted_platform(args.platform, PROJECT_DIR)
    called = {job["uses"] for job in (workflow["jobs"]["start"], workflow["jobs"]["stop"])}
    assert called == {
        f"{pin.repository}/.github/workflows/gpu-runner-{name}.yml@{pin.commit}" for name in ("start", "stop")
    }
