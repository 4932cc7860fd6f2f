"""Render the instance's user-data: `user_data.sh` with this run's values filled in as shell-quoted data.

The JIT runner config never passes through here: user-data is readable through instance metadata and the EC2
API, so the script reads the config from SSM at boot (and deletes it). Values such as the runner name are
`shlex.quote`d into fixed assignment lines at the top of the script, so no value can become code.
"""

from __future__ import annotations

import re
import shlex
from importlib import resources

from gpu_runner.core import naming
from gpu_runner.core.errors import SettingsError
from gpu_runner.core.settings import Settings

# EC2 rejects user-data above 16 KB (counted before base64 encoding).
MAX_USER_DATA_BYTES = 16384
DEFAULT_ROOT = "/opt/gpu-runner"

_PLACEHOLDER = re.compile(r"@@([A-Z0-9_]+)@@")


def template(name: str = "user_data.sh") -> str:
    """An unrendered script (user_data.sh, job_started_hook.sh), shipped inside the package (and the wheel)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _fill(text: str, values: dict[str, str], what: str) -> str:
    found = _PLACEHOLDER.findall(text)
    # Each placeholder sits once, alone on the right of an assignment: the only place quoted data is inert.
    if sorted(found) != sorted(values):
        raise RuntimeError(f"{what} placeholders {sorted(found)} do not match {sorted(values)}")
    return _PLACEHOLDER.sub(lambda match: shlex.quote(values[match.group(1)]), text)


def render_job_started_hook(ctx: naming.RunContext) -> str:
    """The runner's job-started hook: accepts only this run's train job (repository, run id, attempt, job id,
    workflow file and ref, event), as the launching start job saw them. Refuses to render a hook that could not
    tell the right job from another (an empty value would be compared against nothing)."""
    values = {
        "REPOSITORY": ctx.repository,
        "RUN_ID": ctx.run_id,
        "RUN_ATTEMPT": ctx.run_attempt,
        "JOB": naming.TRAIN_JOB,
        "WORKFLOW_REF": ctx.workflow_ref,
        "EVENTS": " ".join(naming.TRAIN_EVENTS),
    }
    env_names = {
        "REPOSITORY": "GITHUB_REPOSITORY",
        "RUN_ID": "GITHUB_RUN_ID",
        "RUN_ATTEMPT": "GITHUB_RUN_ATTEMPT",
        "WORKFLOW_REF": "GITHUB_WORKFLOW_REF",
    }
    for key, env_name in env_names.items():
        if not values[key].strip():
            raise SettingsError(
                f"{env_name} is empty: the runner's job-started hook needs it to accept only this run's train "
                "job (GitHub Actions sets it in every job; run `gpu-runner launch` from train.yml's start job)"
            )
    if ctx.event_name not in naming.TRAIN_EVENTS:
        raise SettingsError(
            f"GITHUB_EVENT_NAME is {ctx.event_name!r}: a GPU runner is launched only for "
            f"{', '.join(naming.TRAIN_EVENTS)} (the triggers of train.yml, sweep.yml and predict.yml)"
        )
    return _fill(_without_comments(template("job_started_hook.sh")), values, "job_started_hook.sh")


def _without_comments(script: str) -> str:
    """The script minus its comment-only lines (the shebang stays): it rides inside the user-data, whose 16 KB
    EC2 counts; the commented original ships in the package."""
    first, _, rest = script.partition("\n")
    return (
        "\n".join([first, *(line for line in rest.splitlines() if not line.lstrip().startswith("#"))]) + "\n"
    )


def render_user_data(
    settings: Settings,
    *,
    region: str,
    parameter_name: str,
    runner_name: str,
    expires_at: int,
    job_started_hook: str,
    root: str = DEFAULT_ROOT,
) -> str:
    """The user-data script of one runner instance.

    `expires_at` (epoch seconds) caps the on-instance max lifetime so it never outlives the launcher's tag;
    `job_started_hook` is render_job_started_hook()'s script, which the boot script installs for the runner;
    `root` is where the runner and the boot log live (tests point it into a sandbox).
    """
    for name, number in (
        ("expires_at", expires_at),
        ("max_runtime_minutes", settings.max_runtime_minutes),
        ("idle_timeout_minutes", settings.idle_timeout_minutes),
    ):
        # Spliced into shell arithmetic: must be a true integer, not a string that merely looks like one.
        if not isinstance(number, int) or isinstance(number, bool):
            raise SettingsError(f"{name}: must be an integer (got {number!r})")
    if not root.startswith("/"):
        raise SettingsError(f"bootstrap root '{root}' must be an absolute path")
    values = {
        "ROOT": root.rstrip("/") or "/",
        "REGION": region,
        "PARAMETER_NAME": parameter_name,
        "RUNNER_NAME": runner_name,
        "EXPIRES_AT": str(expires_at),
        "MAX_RUNTIME_MINUTES": str(settings.max_runtime_minutes),
        "IDLE_TIMEOUT_MINUTES": str(settings.idle_timeout_minutes),
        "IMAGE": settings.image,
        "RUNNER_USER": settings.runner_user,
        "RUNNER_VERSION": settings.runner_version,
        "RUNNER_SHA256": settings.runner_sha256,
        "RUNNER_MIRROR": settings.runner_mirror,
        "JOB_STARTED_HOOK": job_started_hook,
    }
    rendered = _fill(template(), values, "user_data.sh")
    size = len(rendered.encode("utf-8"))
    if size > MAX_USER_DATA_BYTES:
        raise SettingsError(
            f"user-data is {size} bytes, above EC2's limit of {MAX_USER_DATA_BYTES}; shorten the image name, "
            "mirror or SSM prefix"
        )
    return rendered
