"""`gpu-runner doctor`'s GitHub guards (issue 30): what guards the default branch, promote's `production`
environment, who may run a fork's pull request workflows. Each guard as manual/setup.md sets it passes; each way
of weakening it, planted in the GitHub double (which answers as GitHub's REST description says), fails with its
fix, or warns where the weakness is an admin's own or cannot be read. Every run is read-only (GET only).

No AWS here (these checks make no AWS call): the push tier runs them. tests/runner/test_doctor.py runs the same
faults through the whole doctor on the deployed stack. That promote.yml runs in the environment checked here and
that each fix's setup section exists are a project's promote.yml test and tests/test_manual_setup.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

import pytest

from gpu_runner.core.aws import Aws
from gpu_runner.core.settings import settings_from_mapping
from gpu_runner.doctor import doctor, doctor_branch, doctor_repository
from gpu_runner.doctor.doctor_checks import Outcome, Target
from gpu_runner_testing.github_double import ADMIN_TOKEN, DEFAULT_REPOSITORY, GitHubDouble
from gpu_runner_testing.github_settings import (
    ADMIN_ROLE_BYPASS,
    DELETION_RULE,
    NON_FAST_FORWARD_RULE,
    Protection,
    RepositorySettings,
    pull_request_rule,
    setup_guards,
)

NO_AWS = cast(Aws, None)  # these checks never touch AWS: a call would fail the test at once
META_ONLY_TOKEN = "github_pat_meta_actions_0123456789"  # Metadata + Actions: read, no Administration


def run(double: GitHubDouble, check: Callable[..., Any], token: str = ADMIN_TOKEN) -> Outcome:
    """One check with the admin's token; exactly one line, well formed, and nothing but GET requests."""
    target = Target(
        settings=settings_from_mapping({"project": "guards", "region": "eu-west-1", "instance_types": ["g4dn.xlarge"]}),
        repository=DEFAULT_REPOSITORY, train_branch_prefix="train/", default_branch="main",
        env={"GITHUB_API_URL": double.url, "GITHUB_TOKEN": token},
    )  # fmt: skip
    double.clear_calls()
    name = next(n for n, c in doctor.GITHUB_CHECKS if c is check)
    (outcome,) = doctor.guarded(name, lambda: check(target, NO_AWS), "eu-west-1")
    assert re.fullmatch(r"(✓|✗|!) [a-z ]+: \S.*", outcome.line()), outcome.line()
    assert ("; fix: " in outcome.line()) == bool(outcome.fix)
    assert {c.method for c in double.calls} <= {"GET"}, double.calls
    assert double.take_violations() == []
    return outcome


@pytest.fixture
def repo(github_double: GitHubDouble) -> RepositorySettings:
    """The repository as manual/setup.md leaves it."""
    settings = github_double.settings[DEFAULT_REPOSITORY]
    setup_guards(settings)
    return settings


def mark(outcome: Outcome) -> str:
    return outcome.line()[0]


# ---------------------------------------------------------------------- the default branch
def test_the_ruleset_setup_asks_for_passes(github_double: GitHubDouble, repo: RepositorySettings) -> None:
    outcome = run(github_double, doctor_branch.check_default_branch_protection)
    assert mark(outcome) == "✓", outcome.line()
    assert outcome.found == (
        "main needs a pull request with 1 approving review(s), approvals dismissed by a new push, the last push "
        f"approved by someone else, no force push, no deletion (ruleset 'default branch' (id 1, {DEFAULT_REPOSITORY})); "
        "GitHub Actions cannot approve pull requests"
    )


def _replace_rules(*rules: dict[str, Any], **options: Any) -> Callable[[RepositorySettings], None]:
    def plant(repo: RepositorySettings) -> None:
        repo.rulesets.clear()
        repo.add_ruleset("default branch", list(rules), **options)

    return plant


FULL = (pull_request_rule(), NON_FAST_FORWARD_RULE, DELETION_RULE)
ALL_FIVE = (
    "a pull request with an approving review, approvals dismissed by a new push, the last push approved by someone "
    "else, force pushes blocked and deletion blocked"
)
# Each way one collaborator ships a commit nobody else reviewed: (plant, mark, in the line's found, in its fix).
BRANCH_WEAKENINGS: dict[str, tuple[Callable[[RepositorySettings], None], str, str, str]] = {
    "no ruleset, no protection": (
        lambda r: r.rulesets.clear(), "✗", f"nothing enforces {ALL_FIVE}", "Require a pull request before merging"),
    "0 required approvals": (
        _replace_rules(pull_request_rule(reviews=0), NON_FAST_FORWARD_RULE, DELETION_RULE), "✗",
        "nothing enforces a pull request with an approving review", "1 required approval"),
    "approvals survive a push": (
        _replace_rules(pull_request_rule(dismiss_stale=False), NON_FAST_FORWARD_RULE, DELETION_RULE), "✗",
        "nothing enforces approvals dismissed by a new push", "Dismiss stale pull request approvals"),
    "the pusher may approve the last push": (
        _replace_rules(pull_request_rule(last_push=False), NON_FAST_FORWARD_RULE, DELETION_RULE), "✗",
        "nothing enforces the last push approved by someone else", "Require approval of the most recent reviewable push"),
    "force pushes allowed": (
        _replace_rules(pull_request_rule(), DELETION_RULE), "✗", "nothing enforces force pushes blocked", "Block force pushes"),
    "deletion allowed": (
        _replace_rules(pull_request_rule(), NON_FAST_FORWARD_RULE), "✗", "nothing enforces deletion blocked",
        "Restrict deletions"),
    # The rules endpoint leaves out the rules of these rulesets (the description): they guard nothing.
    "the ruleset only evaluates": (_replace_rules(*FULL, enforcement="evaluate"), "✗", f"nothing enforces {ALL_FIVE}",
                                   "Enforcement status Active"),
    "the ruleset is disabled": (_replace_rules(*FULL, enforcement="disabled"), "✗", f"nothing enforces {ALL_FIVE}",
                                "Enforcement status Active"),
    "the ruleset targets other branches": (
        _replace_rules(*FULL, include=("refs/heads/release/*",)), "✗", f"nothing enforces {ALL_FIVE}",
        "target the default branch"),
    "the ruleset excludes the default branch": (
        _replace_rules(*FULL, include=("~ALL",), exclude=("refs/heads/main",)), "✗", f"nothing enforces {ALL_FIVE}",
        "target the default branch"),
    "a team may bypass": (
        _replace_rules(*FULL, bypass_actors=[{"actor_id": 7, "actor_type": "Team", "bypass_mode": "always"}]), "✗",
        f"Team 7 (always) may bypass every rule enforcing {ALL_FIVE}", "remove Team 7 (always) from the bypass list"),
    # `pull_request` mode merges a pull request without the review, but pushes nothing past the other rules.
    "the write role may merge unreviewed": (
        _replace_rules(*FULL, bypass_actors=[{"actor_id": 4, "actor_type": "RepositoryRole", "bypass_mode": "pull_request"}]),
        "✗", "RepositoryRole 4 (pull_request) may bypass every rule enforcing a pull request with an approving review, "
        "approvals dismissed by a new push and the last push approved by someone else", "remove RepositoryRole 4"),
    "a deploy key may push": (
        _replace_rules(*FULL, bypass_actors=[{"actor_id": None, "actor_type": "DeployKey", "bypass_mode": "always"}]),
        "✗", f"DeployKey (always) may bypass every rule enforcing {ALL_FIVE}", "remove DeployKey"),
    "an app is exempt": (
        _replace_rules(*FULL, bypass_actors=[{"actor_id": 99, "actor_type": "Integration", "bypass_mode": "exempt"}]),
        "✗", "Integration 99 (exempt) may bypass", "remove Integration 99 (exempt)"),
    "GitHub Actions may approve pull requests": (
        lambda r: setattr(r, "actions_can_approve", True), "✗", "GitHub Actions may approve pull requests",
        "untick Allow GitHub Actions to create and approve pull requests"),
    # Within an admin's own power (they may rewrite the ruleset): named, not failing.
    "the admin role may bypass": (
        _replace_rules(*FULL, bypass_actors=[ADMIN_ROLE_BYPASS]), "!", f"admins may bypass {ALL_FIVE}",
        "remove the admin role from the ruleset's bypass list"),
    "organization admins may bypass": (
        _replace_rules(*FULL, bypass_actors=[{"actor_id": None, "actor_type": "OrganizationAdmin", "bypass_mode": "always"}]),
        "!", "admins may bypass", "remove the admin role"),
    # An organization's ruleset: its bypass list is returned to the organization's owners only.
    "only an organization ruleset, bypass list unreadable": (
        _replace_rules(*FULL, source_type="Organization"), "!",
        f"ruleset 'default branch' (id 2, octo-org) alone enforce {ALL_FIVE}, and this token may not read who may bypass it",
        "an organization owner confirms"),
    "classic protection only": (
        lambda r: (r.rulesets.clear(), r.protection.update(main=Protection())), "✓", "(branch protection)", ""),
    "classic protection allowing force pushes": (
        lambda r: (r.rulesets.clear(), r.protection.update(main=Protection(force_pushes=True))), "✗",
        "nothing enforces force pushes blocked", "Block force pushes"),
    "classic protection with a bypass user": (
        lambda r: (r.rulesets.clear(), r.protection.update(main=Protection(bypass_users=("eve",)))), "✗",
        "User eve may bypass every rule enforcing a pull request with an approving review", "remove User eve"),
    "classic protection without admins": (
        lambda r: (r.rulesets.clear(), r.protection.update(main=Protection(enforce_admins=False))), "!",
        f"admins may bypass {ALL_FIVE}", "Do not allow bypassing the above settings"),
    # Layering: the team may skip the ruleset, not the classic rule that requires the same.
    "a bypassable ruleset under classic protection": (
        lambda r: (_replace_rules(*FULL, bypass_actors=[{"actor_id": 7, "actor_type": "Team"}])(r),
                   r.protection.update(main=Protection())), "✓", "(branch protection)", ""),
    "two rulesets together": (
        lambda r: (_replace_rules(pull_request_rule())(r), r.add_ruleset("no rewrites", [NON_FAST_FORWARD_RULE, DELETION_RULE])),
        "✓", f"(ruleset 'default branch' (id 2, {DEFAULT_REPOSITORY}) and ruleset 'no rewrites' (id 3, {DEFAULT_REPOSITORY}))", ""),
}  # fmt: skip


@pytest.mark.parametrize("weakening", BRANCH_WEAKENINGS, ids=list(BRANCH_WEAKENINGS))
def test_each_weakening_of_the_default_branch_guard(
    github_double: GitHubDouble, repo: RepositorySettings, weakening: str
) -> None:
    plant, expected_mark, says, fix = BRANCH_WEAKENINGS[weakening]
    plant(repo)
    outcome = run(github_double, doctor_branch.check_default_branch_protection)
    assert (mark(outcome), outcome.ok) == (expected_mark, expected_mark != "✗"), outcome.line()
    assert says in outcome.found and fix in outcome.fix, outcome.line()


def test_an_organization_owner_sees_the_bypass_list_and_a_team_on_it_fails(
    github_double: GitHubDouble, repo: RepositorySettings
) -> None:
    _replace_rules(*FULL, source_type="Organization", bypass_actors=[{"actor_id": 3, "actor_type": "Team"}])(
        repo
    )
    github_double.org_owner_tokens.add(ADMIN_TOKEN)
    outcome = run(github_double, doctor_branch.check_default_branch_protection)
    assert (
        mark(outcome) == "✗"
        and f"Team 3 (always) may bypass every rule enforcing {ALL_FIVE}" in outcome.found
    )


def test_a_token_that_cannot_read_a_source_never_passes(
    github_double: GitHubDouble, repo: RepositorySettings
) -> None:
    """Without Administration: read, branch protection and the workflow token's settings are refused (403): with
    the ruleset in place the branch is guarded, but whether GitHub Actions may approve stays unknown: ✗."""
    github_double.tokens[META_ONLY_TOKEN] = {"metadata": "read", "actions": "read"}
    outcome = run(github_double, doctor_branch.check_default_branch_protection, META_ONLY_TOKEN)
    assert mark(outcome) == "✗", outcome.line()
    assert "whether GitHub Actions may approve pull requests could not be read (403" in outcome.found
    assert "repository admin's GITHUB_TOKEN" in outcome.fix and "nothing enforces" not in outcome.found


def test_a_non_admin_cannot_tell_unprotected_from_hidden(
    github_double: GitHubDouble, repo: RepositorySettings
) -> None:
    """Classic protection alone, read by a user who is not an admin: GitHub answers a bare 404 "Not Found", not
    "Branch not protected"; the rulesets hold nothing, so doctor says it could not read, with the admin fix."""
    repo.rulesets.clear()
    repo.protection["main"] = Protection()
    github_double.non_admin_tokens.add(ADMIN_TOKEN)
    outcome = run(github_double, doctor_branch.check_default_branch_protection)
    assert mark(outcome) == "✗", outcome.line()
    assert "its branch protection could not be read (GitHub answered 404 Not Found)" in outcome.found
    assert "repository admin's GITHUB_TOKEN" in outcome.fix


@pytest.mark.parametrize("check", [c for _, c in doctor.GITHUB_CHECKS[2:]], ids=lambda c: c.__name__)
def test_without_the_admin_token_each_guard_fails(
    github_double: GitHubDouble, check: Callable[..., Any]
) -> None:
    outcome = run(github_double, check, token="")
    assert (
        mark(outcome) == "✗" and "GITHUB_TOKEN is not set" in outcome.found and "gh auth token" in outcome.fix
    )
    assert github_double.calls == []


# ---------------------------------------------------------------------- production
def test_the_production_environment_setup_asks_for_passes(
    github_double: GitHubDouble, repo: RepositorySettings
) -> None:
    outcome = run(github_double, doctor_repository.check_production_environment)
    assert outcome.line() == (
        "✓ production environment: production: 1 required reviewer(s), none approves their own run; deployable "
        "from main only"
    )


def _environment(**options: Any) -> Callable[[RepositorySettings], None]:
    base: dict[str, Any] = {
        "reviewers": ("octo-reviewer",),
        "prevent_self_review": True,
        "branches": (("main", "branch"),),
    }
    return lambda r: r.set_environment("production", **{**base, **options})


PRODUCTION_WEAKENINGS: dict[str, tuple[Callable[[RepositorySettings], None], str]] = {
    "no environment": (lambda r: r.environments.clear(), "has no environment production"),
    "no required reviewers": (_environment(reviewers=()), "no required reviewers"),
    "a reviewer approves their own run": (_environment(prevent_self_review=False), "self-review is not prevented"),
    "every branch may deploy": (_environment(branches=None), "every branch and tag may deploy to it"),
    "every protected branch may deploy": (_environment(branches="protected"), "every protected branch may deploy"),
    "a train branch pattern too": (
        _environment(branches=(("main", "branch"), ("train/*", "branch"))), "[branch main, branch train/*]"),
    "a tag named like the branch": (_environment(branches=(("main", "tag"),)), "[tag main], not only the branch main"),
    "custom rules, none set": (_environment(branches=()), "[none]"),
}  # fmt: skip


@pytest.mark.parametrize("weakening", PRODUCTION_WEAKENINGS, ids=list(PRODUCTION_WEAKENINGS))
def test_each_weakening_of_production_fails(
    github_double: GitHubDouble, repo: RepositorySettings, weakening: str
) -> None:
    plant, says = PRODUCTION_WEAKENINGS[weakening]
    plant(repo)
    outcome = run(github_double, doctor_repository.check_production_environment)
    assert mark(outcome) == "✗" and says in outcome.found, outcome.line()
    assert (
        "Required reviewers" in outcome.fix
        and "Prevent self-review" in outcome.fix
        and "`main`" in outcome.fix
    )


def test_a_token_without_actions_read_fails_production(
    github_double: GitHubDouble, repo: RepositorySettings
) -> None:
    github_double.tokens[META_ONLY_TOKEN] = {"metadata": "read", "administration": "read"}
    outcome = run(github_double, doctor_repository.check_production_environment, META_ONLY_TOKEN)
    assert mark(outcome) == "✗" and "GitHub answered 403" in outcome.found and "Actions: read" in outcome.fix


# ---------------------------------------------------------------------- fork pull requests
FORK_POLICIES: dict[str, tuple[Callable[[RepositorySettings], None], str, str]] = {
    "private, fork pull requests run nothing": (lambda r: None, "✓", "does not apply"),
    "private, fork workflows wait for approval": (
        lambda r: r.private_forks.update(run_workflows_from_fork_pull_requests=True, require_approval_for_fork_pr_workflows=True),
        "✓", "wait for approval"),
    "private, fork workflows run unapproved": (
        lambda r: r.private_forks.update(run_workflows_from_fork_pull_requests=True), "✗", "without approval"),
    "public, all external contributors approved": (
        lambda r: (setattr(r, "public", True), setattr(r, "fork_approval", "all_external_contributors")), "✓",
        "every outside contributor's fork pull request waits for approval"),
    "public, GitHub's default (first-time contributors)": (
        lambda r: setattr(r, "public", True), "✗", "approval policy first_time_contributors"),
    "public, first-time contributors new to GitHub": (
        lambda r: (setattr(r, "public", True), setattr(r, "fork_approval", "first_time_contributors_new_to_github")),
        "✗", "approval policy first_time_contributors_new_to_github"),
}  # fmt: skip


@pytest.mark.parametrize("policy", FORK_POLICIES, ids=list(FORK_POLICIES))
def test_fork_pull_request_policies(
    github_double: GitHubDouble, repo: RepositorySettings, policy: str
) -> None:
    plant, expected_mark, says = FORK_POLICIES[policy]
    plant(repo)
    outcome = run(github_double, doctor_repository.check_fork_approval)
    assert mark(outcome) == expected_mark and says in outcome.found, outcome.line()
    if expected_mark == "✗":
        assert "Require approval for" in outcome.fix


def test_a_token_without_administration_read_fails_the_fork_check(
    github_double: GitHubDouble, repo: RepositorySettings
) -> None:
    github_double.tokens[META_ONLY_TOKEN] = {"metadata": "read", "actions": "read"}
    outcome = run(github_double, doctor_repository.check_fork_approval, META_ONLY_TOKEN)
    assert (
        mark(outcome) == "✗"
        and "GitHub answered 403" in outcome.found
        and "Administration: read" in outcome.fix
    )
