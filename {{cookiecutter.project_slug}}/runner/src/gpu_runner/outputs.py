"""Step outputs and the job summary for GitHub Actions: outputs are appended to $GITHUB_OUTPUT as each value
becomes known.

Written one at a time (not at the end) so the `stop` job can clean up whatever exists even if `launch` dies
half-way.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping


def write_outputs(
    values: Mapping[str, str], env: Mapping[str, str] | None = None, *, unprinted: Collection[str] = ()
) -> None:
    """Append to $GITHUB_OUTPUT and echo to the log, except the values of `unprinted` keys: a job output is
    visible in a log only when something prints it (the runner's label must not be: issue 13, item 1)."""
    env = os.environ if env is None else env
    for key, value in values.items():
        if "\n" in value or "\n" in key:
            raise ValueError(f"output {key!r} must be a single line")
        print(f"{key}=(set, not printed)" if key in unprinted else f"{key}={value}")
    path = env.get("GITHUB_OUTPUT")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.writelines(f"{key}={value}\n" for key, value in values.items())


def append_summary(markdown: str, env: Mapping[str, str] | None = None) -> None:
    """Add to the job summary ($GITHUB_STEP_SUMMARY) when running in GitHub Actions."""
    env = os.environ if env is None else env
    path = env.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(markdown + "\n")


def mask(secret: str, env: Mapping[str, str] | None = None) -> None:
    """A backstop for a secret this process holds: `::add-mask::` (docs.github.com "Workflow commands for GitHub
    Actions", "Masking a value in a log") makes the runner print *** for it in every later line of the job's log,
    should anything print it. Only in GitHub Actions; the value is one line (a JIT config or token), which is the
    unit the runner masks. Nothing here prints a secret otherwise."""
    env = os.environ if env is None else env
    if env.get("GITHUB_ACTIONS") == "true" and secret.strip():
        print(f"::add-mask::{secret.strip()}", flush=True)
