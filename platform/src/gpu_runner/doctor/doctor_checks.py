"""What a doctor check is: what it looks at (Target), what it answers (Outcome, one printed line), its signature.

A module of its own so that doctor.py imports the check modules (doctor_aws, doctor_github, doctor_mlflow) and
they import only these types: no import cycle between the runner of the checks and the checks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpu_runner.core.aws import Aws
from gpu_runner.core.settings import Settings
from gpu_runner.pin.project_pin import Pin

OK, FAIL, WARN = "✓", "✗", "!"


@dataclass(frozen=True)
class Outcome:
    """One printed line: `fix` is empty exactly when the check passed; a warning has a fix but does not fail."""

    check: str
    found: str
    fix: str = ""
    # A weakness doctor names with its fix without failing the run: one it cannot judge for you (who an
    # organization lets bypass its ruleset) or one within an admin's own power (admins bypassing the rules).
    warning: bool = False

    @property
    def ok(self) -> bool:
        """Does not fail the run: passed, or only a warning."""
        return not self.fix or self.warning

    def line(self) -> str:
        """Exactly one line: an AWS or GitHub message with line breaks in it is folded into it."""
        found, fix = " ".join(self.found.split()), " ".join(self.fix.split())
        if not self.fix:
            return f"{OK} {self.check}: {found}"
        return f"{WARN if self.warning else FAIL} {self.check}: {found}; fix: {fix}"


def passed(check: str, found: str) -> Outcome:
    return Outcome(check, found)


def failed(check: str, found: str, fix: str) -> Outcome:
    return Outcome(check, found, fix)


def warned(check: str, found: str, fix: str) -> Outcome:
    return Outcome(check, found, fix, warning=True)


@dataclass
class Target:
    """What the checks look at: the settings, the repository and branches the stack trusts, the credentials."""

    settings: Settings
    repository: str  # owner/name
    train_branch_prefix: str  # the settings' (cli passes it), or the --branch-prefix asked for
    default_branch: str = "main"
    # The platform's reusable workflows the launch roles must trust: the project's pin (or doctor's --platform);
    # None when neither named one (the trust checks then fail, saying so).
    platform: Pin | None = None
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    # Filled in by the stack check: the outputs of the bootstrap stack (role ARNs, bucket, profile, group).
    outputs: dict[str, str] = field(default_factory=dict)
    # Filled in by the repository settings check: the repository's Actions variables (name -> value).
    repo_variables: dict[str, str] = field(default_factory=dict)


Check = Callable[[Target, Aws], Iterable[Outcome]]
