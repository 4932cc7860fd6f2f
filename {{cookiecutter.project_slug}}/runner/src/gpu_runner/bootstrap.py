"""Render the instance's user-data: `bootstrap.sh` with this run's values filled in as shell-quoted data.

The JIT runner config never passes through here: user-data is readable through instance metadata and the EC2
API, so the script reads the config from SSM at boot (and deletes it). Values such as the runner name are
`shlex.quote`d into fixed assignment lines at the top of the script, so no value can become code.
"""

from __future__ import annotations

import re
import shlex
from importlib import resources

from .errors import SettingsError
from .settings import Settings

# EC2 rejects user-data above 16 KB (counted before base64 encoding).
MAX_USER_DATA_BYTES = 16384
DEFAULT_ROOT = "/opt/gpu-runner"

_PLACEHOLDER = re.compile(r"@@([A-Z0-9_]+)@@")


def template() -> str:
    """The unrendered script, shipped inside the package (and so inside the wheel)."""
    return resources.files(__package__).joinpath("bootstrap.sh").read_text(encoding="utf-8")


def render_user_data(
    settings: Settings,
    *,
    region: str,
    parameter_name: str,
    runner_name: str,
    expires_at: int,
    root: str = DEFAULT_ROOT,
) -> str:
    """The user-data script of one runner instance.

    `expires_at` (epoch seconds) caps the on-instance max lifetime so it never outlives the launcher's tag;
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
    }
    text = template()
    found = _PLACEHOLDER.findall(text)
    # Each placeholder sits once, alone on the right of an assignment: the only place quoted data is inert.
    if sorted(found) != sorted(values):
        raise RuntimeError(f"bootstrap.sh placeholders {sorted(found)} do not match {sorted(values)}")
    rendered = _PLACEHOLDER.sub(lambda match: shlex.quote(values[match.group(1)]), text)
    size = len(rendered.encode("utf-8"))
    if size > MAX_USER_DATA_BYTES:
        raise SettingsError(
            f"user-data is {size} bytes, above EC2's limit of {MAX_USER_DATA_BYTES}; shorten the image name, "
            "mirror or SSM prefix"
        )
    return rendered
