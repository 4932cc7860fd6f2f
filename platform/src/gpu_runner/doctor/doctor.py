"""`gpu-runner doctor`: a read-only preflight of the AWS account and GitHub repository before the first push.

One line per check, `✓ <check>: <what was found>` or `✗ <check>: <what is wrong>; fix: <what to do>`, and a
non-zero exit on any ✗ (`! <check>: ...; fix: ...` is a warning: named, with its fix, but not failing). Nothing is created, changed or deleted: only Get/List/Describe/Head calls on AWS and GET
on GitHub (an App's installation token exchange aside, which registers nothing). The checks themselves live in
doctor_aws.py, doctor_github.py, doctor_branch.py, doctor_repository.py and doctor_mlflow.py (their shared types
in doctor_checks.py); this module runs them and turns any failure into a ✗ line, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import requests
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError
from github import GithubException

from gpu_runner.core.aws import Aws
from gpu_runner.core.errors import RunnerError
from gpu_runner.doctor import doctor_aws, doctor_branch, doctor_github, doctor_mlflow, doctor_repository
from gpu_runner.doctor.doctor_checks import Outcome, Target, failed

# The GitHub half, in the order they print: the credentials and settings the workflows use, then what guards
# the default branch the roles trust, promote's environment and who may run a fork's workflows.
GITHUB_CHECKS = [*doctor_github.CHECKS, *doctor_branch.CHECKS, *doctor_repository.CHECKS]


def aws_failure(check: str, error: Exception, region: str) -> Outcome:
    """An AWS call that failed outright, as a ✗ line naming the call and what to do."""
    if isinstance(error, NoCredentialsError):
        return failed(
            check, "no AWS credentials found", "aws sso login (or export AWS_PROFILE) and run again"
        )
    if isinstance(error, NoRegionError):
        return failed(check, "no AWS region", "set region in configs/gpu-runner.yaml")
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", "")
        if code in {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"}:
            fix = (
                f"run doctor with credentials that may call {error.operation_name} (the admin credentials "
                "make bootstrap used)"
            )
        elif code in {"ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "AuthFailure"}:
            fix = "your AWS session expired or is not valid: aws sso login and run again"
        else:
            fix = f"see the message; the region is {region} (configs/gpu-runner.yaml `region`)"
        return failed(check, f"AWS refused {error.operation_name}: {code}: {message}", fix)
    if isinstance(error, BotoCoreError):
        return failed(
            check,
            f"AWS unreachable: {error}",
            f"check the network and that region {region} (configs/gpu-runner.yaml) exists",
        )
    return failed(check, f"{type(error).__name__}: {error}", "see the message")


def guarded(check_name: str, run: Callable[[], Iterable[Outcome]], region: str) -> list[Outcome]:
    """Run one check; an error inside it becomes its ✗ line instead of ending the whole doctor."""
    try:
        return list(run())
    except RunnerError as error:
        return [failed(check_name, str(error).replace("\n", " "), "see the message")]
    except (ClientError, BotoCoreError) as error:
        return [aws_failure(check_name, error, region)]
    except GithubException as error:
        detail = error.data.get("message", "") if isinstance(error.data, dict) else ""
        return [
            failed(check_name, f"GitHub answered {error.status} {detail}".strip(), "see GitHub's message")
        ]
    except requests.RequestException as error:
        return [
            failed(
                check_name,
                f"network error ({type(error).__name__}): {error}",
                "check GITHUB_API_URL (unset for github.com), MLFLOW_TRACKING_URI and the network",
            )
        ]


def run_checks(target: Target, aws: Aws, print_line: Callable[[str], Any] = print) -> list[Outcome]:
    """Every check in order, each line printed as soon as it is known; returns all outcomes."""
    region = target.settings.region
    outcomes: list[Outcome] = []

    def emit(found: Iterable[Outcome]) -> list[Outcome]:
        found = list(found)
        for outcome in found:
            print_line(outcome.line())
        outcomes.extend(found)
        return found

    identity = emit(guarded("AWS credentials", lambda: doctor_aws.check_identity(target, aws), region))
    if all(o.ok for o in identity):
        for name, check in doctor_aws.CHECKS:
            emit(guarded(name, lambda check=check: check(target, aws), region))
    for name, check in [*GITHUB_CHECKS, *doctor_mlflow.CHECKS]:
        emit(guarded(name, lambda check=check: check(target, aws), region))
    failures = sum(not o.ok for o in outcomes)
    warnings = sum(o.warning for o in outcomes)
    summary = "all checks passed" if not failures else f"{failures} check(s) failed"
    if warnings:
        summary += f", {warnings} warning(s)"
    print_line(f"{summary} ({len(outcomes)} checked)")
    return outcomes
