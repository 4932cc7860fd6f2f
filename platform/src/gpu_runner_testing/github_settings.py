"""The repository settings `gpu-runner doctor` reads, for the GitHub double: what guards the default branch (its
rulesets, classic branch protection, whether GitHub Actions may approve pull requests), the `production`
environment promote.yml runs in, and who may run a fork's pull request workflows.

State and answers only, in the shapes of GitHub's REST description (github-openapi.json in this package):
github_double.py serves them over HTTP, after authentication, the token's permission and the request's schema
were checked, and checks every answer against the description again. What GitHub does that the description does
not say is cited where it is encoded.
"""

from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# docs.github.com/rest/branches/branch-protection#get-branch-protection: an unprotected branch is answered 404
# "Branch not protected" (hub4j/github-api#2062, 2025, quotes the body); a user who is not a repository admin
# gets a plain 404 "Not Found" whether or not it is protected (ossf/scorecard#138, 2021; GitHub community
# discussion #24582).
PROTECTION_DOCS = "https://docs.github.com/rest/branches/branch-protection#get-branch-protection"
RULES_DOCS = "https://docs.github.com/rest/repos/rules"
ENVIRONMENTS_DOCS = "https://docs.github.com/rest/deployments/environments#get-an-environment"
ACTIONS_PERMISSIONS_DOCS = "https://docs.github.com/rest/actions/permissions"
# docs.github.com "Managing GitHub Actions settings for a repository" (the reusable workflow-run-approve-public-
# fork): "By default, all first-time contributors require approval to run workflows".
DEFAULT_FORK_APPROVAL = "first_time_contributors"
STAMP = "2026-01-01T00:00:00Z"


class NotFound(Exception):
    """GitHub's 404 for this setting, with its message."""

    def __init__(self, message: str, documentation_url: str) -> None:
        super().__init__(message)
        self.message = message
        self.documentation_url = documentation_url


def pull_request_rule(
    reviews: int = 1, dismiss_stale: bool = True, last_push: bool = True, code_owners: bool = False
) -> dict[str, Any]:
    """A ruleset's "Require a pull request before merging" (the description's `repository-rule-pull-request`)."""
    return {
        "type": "pull_request",
        "parameters": {
            "required_approving_review_count": reviews,
            "dismiss_stale_reviews_on_push": dismiss_stale,
            "require_last_push_approval": last_push,
            "require_code_owner_review": code_owners,
            "required_review_thread_resolution": False,
            "allowed_merge_methods": ["merge", "squash", "rebase"],
        },
    }


# "Restrict deletions" and "Block force pushes" (the description's repository-rule-deletion / -non-fast-forward).
DELETION_RULE: dict[str, Any] = {"type": "deletion"}
NON_FAST_FORWARD_RULE: dict[str, Any] = {"type": "non_fast_forward"}
# The repository admin role as a ruleset bypass actor. GitHub does not document RepositoryRole ids; admin is 5
# (maintain 2, write 4) as observed by users (github/rest-api-description#4406 and #7111, 2024-2026).
ADMIN_ROLE_BYPASS: dict[str, Any] = {"actor_id": 5, "actor_type": "RepositoryRole", "bypass_mode": "always"}


@dataclass
class Ruleset:
    id: int
    name: str
    rules: list[dict[str, Any]]
    enforcement: str = "active"  # the description's repository-rule-enforcement: active, evaluate or disabled
    include: tuple[str, ...] = ("~DEFAULT_BRANCH",)
    exclude: tuple[str, ...] = ()
    bypass_actors: list[dict[str, Any]] = field(default_factory=list)
    source_type: str = "Repository"  # or "Organization": a ruleset of the owner, applied to this repository
    source: str = ""


@dataclass
class Protection:
    """Classic branch protection, as its settings page has it (None reviews: no pull request required)."""

    reviews: int | None = 1
    dismiss_stale: bool = True
    last_push: bool = True
    force_pushes: bool = False
    deletions: bool = False
    enforce_admins: bool = True
    bypass_users: tuple[str, ...] = ()


@dataclass
class Environment:
    id: int
    name: str
    reviewers: tuple[str, ...] = ()  # user logins (GitHub allows up to six users or teams)
    prevent_self_review: bool = False
    # None: every branch may deploy (the description: "To allow all branches to deploy, set to `null`");
    # "protected": "only branches with branch protection rules"; else the custom (name pattern, type) policies.
    branches: str | tuple[tuple[str, str], ...] | None = None


class RepositorySettings:
    """One repository's settings. `user(login)` renders the description's `simple-user` (the double's)."""

    def __init__(self, full_name: str, user: Callable[[str, str], dict[str, Any]]) -> None:
        self.full_name = full_name
        self.default_branch = "main"
        self.public = False
        self.rulesets: dict[int, Ruleset] = {}
        self.protection: dict[str, Protection] = {}
        self.actions_can_approve = False  # GitHub's default for a new personal repository (the docs above)
        self.environments: dict[str, Environment] = {}
        self.fork_approval = DEFAULT_FORK_APPROVAL
        # "Workflows from fork pull requests" of a private repository: off unless an admin enables it.
        self.private_forks = {
            "run_workflows_from_fork_pull_requests": False,
            "send_write_tokens_to_workflows": False,
            "send_secrets_and_variables": False,
            "require_approval_for_fork_pr_workflows": False,
        }
        self._user = user
        self._ruleset_ids = itertools.count(1)
        self._environment_ids = itertools.count(161088068)  # the description's example environment id

    # ------------------------------------------------------------------ controls
    def add_ruleset(self, name: str, rules: Iterable[dict[str, Any]], **options: Any) -> int:
        ruleset = Ruleset(next(self._ruleset_ids), name, list(rules), **options)
        ruleset.source = ruleset.source or (
            self.full_name if ruleset.source_type == "Repository" else self.full_name.partition("/")[0]
        )
        self.rulesets[ruleset.id] = ruleset
        return ruleset.id

    def set_environment(self, name: str, **options: Any) -> None:
        self.environments[name] = Environment(next(self._environment_ids), name, **options)

    # ------------------------------------------------------------------ rulesets
    def _targets(self, ruleset: Ruleset, branch: str) -> bool:
        """A ruleset's ref_name condition: `~DEFAULT_BRANCH`, `~ALL` or fnmatch patterns of full ref names
        (the description's repository-ruleset-conditions). fnmatchcase lets `*` cross a `/`, which GitHub's
        fnmatch does not: wider than GitHub, never narrower."""
        ref = f"refs/heads/{branch}"

        def matches(pattern: str) -> bool:
            if pattern == "~ALL":
                return True
            if pattern == "~DEFAULT_BRANCH":
                return branch == self.default_branch
            return fnmatch.fnmatchcase(ref, pattern)

        return any(matches(p) for p in ruleset.include) and not any(matches(p) for p in ruleset.exclude)

    def branch_rules(self, branch: str) -> list[dict[str, Any]]:
        """GET /repos/{o}/{r}/rules/branches/{branch}: the description says "Rules in rulesets with "evaluate"
        or "disabled" enforcement statuses are not returned", and each rule names its ruleset."""
        return [
            {**rule, "ruleset_source_type": r.source_type, "ruleset_source": r.source, "ruleset_id": r.id}
            for r in self.rulesets.values()
            if r.enforcement == "active" and self._targets(r, branch)
            for rule in r.rules
        ]

    def ruleset(self, api: str, ruleset_id: int, can_write: bool) -> dict[str, Any]:
        """GET /repos/{o}/{r}/rulesets/{id} (the description's `repository-ruleset`): "the `bypass_actors`
        property is only returned if the user making the API request has write access to the ruleset"."""
        found = self.rulesets.get(ruleset_id)
        if found is None:
            raise NotFound("Not Found", f"{RULES_DOCS}#get-a-repository-ruleset")
        answer = {
            "id": found.id, "name": found.name, "target": "branch", "source_type": found.source_type,
            "source": found.source, "enforcement": found.enforcement, "node_id": f"RRS_lACkVuc{found.id}",
            "_links": {"self": {"href": f"{api}/rulesets/{found.id}"},
                       "html": {"href": f"https://github.com/{self.full_name}/rules/{found.id}"}},
            "conditions": {"ref_name": {"include": list(found.include), "exclude": list(found.exclude)}},
            "rules": [dict(rule) for rule in found.rules], "created_at": STAMP, "updated_at": STAMP,
        }  # fmt: skip
        if can_write:
            answer["bypass_actors"] = [dict(actor) for actor in found.bypass_actors]
        return answer

    # ------------------------------------------------------------------ classic branch protection
    def branch_protection(self, api: str, branch: str, is_admin: bool) -> dict[str, Any]:
        """GET /repos/{o}/{r}/branches/{branch}/protection (the description's `branch-protection`)."""
        found = self.protection.get(branch)
        if not is_admin:
            raise NotFound("Not Found", PROTECTION_DOCS)
        if found is None:
            raise NotFound("Branch not protected", PROTECTION_DOCS)
        url = f"{api}/branches/{branch}/protection"
        answer: dict[str, Any] = {
            "url": url, "enabled": True,
            "enforce_admins": {"url": f"{url}/enforce_admins", "enabled": found.enforce_admins},
            "required_linear_history": {"enabled": False}, "allow_force_pushes": {"enabled": found.force_pushes},
            "allow_deletions": {"enabled": found.deletions}, "block_creations": {"enabled": False},
            "required_conversation_resolution": {"enabled": False}, "lock_branch": {"enabled": False},
            "allow_fork_syncing": {"enabled": False},
            "required_signatures": {"url": f"{url}/required_signatures", "enabled": False},
        }  # fmt: skip
        if found.reviews is not None:
            answer["required_pull_request_reviews"] = {
                "url": f"{url}/required_pull_request_reviews", "dismiss_stale_reviews": found.dismiss_stale,
                "require_code_owner_reviews": False, "required_approving_review_count": found.reviews,
                "require_last_push_approval": found.last_push,
                "bypass_pull_request_allowances": {
                    "users": [self._user(login, "User") for login in found.bypass_users], "teams": [], "apps": [],
                },
            }  # fmt: skip
        return answer

    def workflow_permissions(self) -> dict[str, Any]:
        """GET /repos/{o}/{r}/actions/permissions/workflow."""
        return {
            "default_workflow_permissions": "read",
            "can_approve_pull_request_reviews": self.actions_can_approve,
        }

    # ------------------------------------------------------------------ environments
    def environment(self, api: str, name: str) -> dict[str, Any]:
        """GET /repos/{o}/{r}/environments/{name} (the description's `environment`); 404 for one that does not
        exist. A required_reviewers rule is listed only with reviewers, a branch_policy rule only with a branch
        policy (the description's example lists wait_timer, required_reviewers and branch_policy rules)."""
        found = self.environments.get(name)
        if found is None:
            raise NotFound("Not Found", ENVIRONMENTS_DOCS)
        rules: list[dict[str, Any]] = []
        if found.reviewers:
            rules.append({
                "id": found.id * 10 + 1, "node_id": f"GA_kwDO{found.id}1", "type": "required_reviewers",
                "prevent_self_review": found.prevent_self_review,
                "reviewers": [{"type": "User", "reviewer": self._user(login, "User")} for login in found.reviewers],
            })  # fmt: skip
        policy: dict[str, bool] | None = None
        if found.branches is not None:
            protected = found.branches == "protected"
            policy = {"protected_branches": protected, "custom_branch_policies": not protected}
            rules.append({"id": found.id * 10 + 2, "node_id": f"GA_kwDO{found.id}2", "type": "branch_policy"})
        return {
            "id": found.id, "node_id": f"EN_kwDO{found.id}", "name": found.name,
            "url": f"{api}/environments/{found.name}",
            "html_url": f"https://github.com/{self.full_name}/deployments/activity_log?environments_filter={found.name}",
            "created_at": STAMP, "updated_at": STAMP, "protection_rules": rules, "deployment_branch_policy": policy,
        }  # fmt: skip

    def branch_policies(self, name: str) -> list[dict[str, Any]]:
        """GET .../environments/{name}/deployment-branch-policies: the custom policies (none otherwise)."""
        found = self.environments.get(name)
        if found is None:
            raise NotFound("Not Found", ENVIRONMENTS_DOCS)
        custom = found.branches if isinstance(found.branches, tuple) else ()
        return [
            {
                "id": found.id * 100 + index,
                "node_id": f"RE_kwDO{found.id}{index}",
                "name": pattern,
                "type": kind,
            }
            for index, (pattern, kind) in enumerate(custom, start=1)
        ]

    # ------------------------------------------------------------------ fork pull requests
    def fork_pr_approval(self) -> dict[str, Any]:
        """GET .../actions/permissions/fork-pr-contributor-approval. GitHub's docs describe the policy for
        public repositories only; what it answers for a private one is not documented: 404 here (stricter than
        an answer; doctor asks only for a public repository)."""
        if not self.public:
            raise NotFound(
                "Not Found",
                f"{ACTIONS_PERMISSIONS_DOCS}#get-fork-pr-contributor-approval-permissions-for-a-repository",
            )
        return {"approval_policy": self.fork_approval}

    def private_fork_workflows(self) -> dict[str, Any]:
        """GET .../actions/permissions/fork-pr-workflows-private-repos ("whether workflows from fork pull
        requests can run on a private repository"): for a public repository 404 here, for the same reason."""
        if self.public:
            raise NotFound(
                "Not Found",
                f"{ACTIONS_PERMISSIONS_DOCS}#get-private-repo-fork-pr-workflow-settings-for-a-repository",
            )
        return dict(self.private_forks)


def setup_guards(settings: RepositorySettings, reviewers: tuple[str, ...] = ("octo-reviewer",)) -> None:
    """What manual/setup.md asks for: a branch ruleset on the default branch (a pull request with one approval,
    stale approvals dismissed, the last push approved by someone else; no force push, no deletion; nobody on
    the bypass list), and the `production` environment with a required reviewer who cannot approve their own
    run, deployable from the default branch only. GitHub Actions may not approve pull requests (the default)."""
    settings.add_ruleset("default branch", [pull_request_rule(), NON_FAST_FORWARD_RULE, DELETION_RULE])
    settings.set_environment(
        "production",
        reviewers=reviewers,
        prevent_self_review=True,
        branches=((settings.default_branch, "branch"),),
    )
