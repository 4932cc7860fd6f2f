"""`gpu-runner bootstrap`'s OIDC subject template (issue 13 item 2), against the GitHub double (which checks every
request and answer against GitHub's REST description, @octokit/openapi 23.0.2)."""

from __future__ import annotations

import pytest

from gpu_runner.core.errors import RunnerError
from gpu_runner.setup import oidc_subject, stack
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY, DEFAULT_TOKEN, RUNNERS_TOKEN, GitHubDouble

TEMPLATE = {"use_default": False, "include_claim_keys": ["repo", "context", "job_workflow_ref"]}


def test_bootstrap_sets_the_template_once(github_double: GitHubDouble, logged) -> None:
    repo = DEFAULT_REPOSITORY.lower()
    assert github_double.oidc_sub[repo] == {"use_default": True}  # a new repository: GitHub's default `sub`
    env = {"GITHUB_TOKEN": DEFAULT_TOKEN, "GITHUB_API_URL": github_double.url}
    assert stack.set_oidc_subject(DEFAULT_REPOSITORY, env) is True
    assert github_double.oidc_sub[repo] == TEMPLATE
    # A re-run reads it back and writes nothing.
    assert stack.set_oidc_subject(DEFAULT_REPOSITORY, env) is False
    puts = [c for c in github_double.calls if c.method == "PUT"]
    assert [c.body for c in puts] == [TEMPLATE]
    assert "already set" in logged()[-1]
    assert github_double.take_violations() == []


def test_a_token_without_actions_write_is_refused_with_the_fix(github_double: GitHubDouble) -> None:
    # The runner credential (Administration: write only) may not change the template: GitHub answers 403.
    with pytest.raises(RunnerError, match=r"GitHub answered 403.*Actions read and write"):
        oidc_subject.set_subject_template(DEFAULT_REPOSITORY, RUNNERS_TOKEN, github_double.url)
    assert github_double.oidc_sub[DEFAULT_REPOSITORY.lower()] == {"use_default": True}


def test_without_a_token_bootstrap_prints_the_exact_one_time_command(
    github_double: GitHubDouble, logged
) -> None:
    assert stack.set_oidc_subject(DEFAULT_REPOSITORY, {}) is False
    (line,) = logged()
    assert (
        f"gh api --method PUT repos/{DEFAULT_REPOSITORY}/actions/oidc/customization/sub -F use_default=false "
        "-f include_claim_keys[]=repo -f include_claim_keys[]=context -f include_claim_keys[]=job_workflow_ref"
    ) in line
    assert github_double.calls == []


def test_the_double_refuses_a_claim_key_github_refuses(github_double: GitHubDouble) -> None:
    """A double that accepted any key would let a typo through: GitHub allows letters, digits and `_` only."""
    import requests

    answer = requests.put(
        f"{github_double.url}/repos/{DEFAULT_REPOSITORY}/actions/oidc/customization/sub",
        json={"use_default": False, "include_claim_keys": ["job-workflow-ref"]},
        headers={"Authorization": f"token {DEFAULT_TOKEN}"},
        timeout=10,
    )
    assert answer.status_code == 422
