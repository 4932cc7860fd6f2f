"""`gpu-runner doctor`: promote's `production` environment, and who may run a fork's pull request workflows.

Both read with the admin's token (GITHUB_TOKEN), only with GET.

- promote.yml moves what predict.yml serves, with credentials only the `production` environment holds (issue 30,
  High 3). GET /repos/{o}/{r}/environments/production (Actions: read; 404 when it does not exist) gives its
  protection rules and deployment branch policy; GET .../deployment-branch-policies its custom branch rules.
  Fails (✗): no environment; no required reviewers (one dispatch promotes); a reviewer may approve their own
  run (the description's `prevent_self_review`: "Whether or not a user who created the job is prevented from
  approving their own job"); a deployment branch policy that admits more than the default branch: none at all
  (the description: "To allow all branches to deploy, set to `null`"), "protected branches" (any branch with a
  protection rule), or custom rules other than exactly the default branch (another branch's or a tag's own
  promote.yml would get the promote credential once a reviewer approves what looks like a promotion).
- A public repository's fork pull requests run the fork's workflows, which can ask for the GPU runner's label
  while a train run's instance boots: the job-started hook refuses them, but the run loses its runner (issue
  30, Low). GitHub: "By default, all first-time contributors require approval to run workflows", and "If you are
  using self-hosted runners, potentially malicious user-controlled workflow code will execute automatically if
  the user is allowed to bypass approval" (docs.github.com, "Managing GitHub Actions settings for a
  repository"). So a public repository must require approval for all external contributors (GET .../actions/
  permissions/fork-pr-contributor-approval, Administration: read). A private repository runs fork pull
  requests' workflows only when "Run workflows from fork pull requests" is on (GET .../actions/permissions/
  fork-pr-workflows-private-repos, Administration: read); then it must require approval.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from github import Github, GithubException

from gpu_runner.core.aws import Aws
from gpu_runner.doctor.doctor_checks import Check, Outcome, Target, failed, passed
from gpu_runner.doctor.doctor_github import admin_client, get_json, github_message, no_admin_token

ENVIRONMENT_CHECK, FORK_CHECK = "production environment", "fork pull request approval"
# promote.yml's `environment:` (a project's tests/workflows/test_promote_workflow.py reads it back).
PROMOTE_ENVIRONMENT = "production"
POLICIES_PER_PAGE = 100  # the description's per_page maximum
ALL_EXTERNAL = "all_external_contributors"
ENVIRONMENT_FIX = (
    f"Settings → Environments → {PROMOTE_ENVIRONMENT}: Required reviewers (a person or team other than who "
    "dispatches promote.yml), tick Prevent self-review; Deployment branches and tags: Selected branches and tags "
    "with the one rule `{branch}` (manual/setup.md, 'The production environment')"
)
PUBLIC_FORK_FIX = (
    "Settings → Actions → General → Approval for running fork pull request workflows from contributors: "
    "Require approval for all external contributors (manual/setup.md, 'Fork pull requests')"
)
PRIVATE_FORK_FIX = (
    "Settings → Actions → General → Fork pull request workflows in private repositories: untick Run workflows "
    "from fork pull requests, or tick Require approval for fork pull request workflows"
)


# ---------------------------------------------------------------------- production
def environment_problems(
    environment: dict[str, Any], policies: list[dict[str, Any]], branch: str
) -> list[str]:
    """What lets promote run without a second person, or from another ref (empty: nothing)."""
    problems: list[str] = []
    rules = environment.get("protection_rules") or []
    reviewers = [
        r for rule in rules if rule.get("type") == "required_reviewers" for r in rule.get("reviewers") or []
    ]
    if not reviewers:
        problems.append("no required reviewers: one dispatch of promote.yml changes what predict.yml serves")
    elif not all(r.get("prevent_self_review") for r in rules if r.get("type") == "required_reviewers"):
        problems.append("a reviewer may approve the promote run they started (self-review is not prevented)")
    policy = environment.get("deployment_branch_policy")
    if policy is None:
        problems.append("every branch and tag may deploy to it")
    elif policy.get("protected_branches"):
        problems.append(f"every protected branch may deploy to it, not only {branch}")
    else:
        rules_seen = sorted(f"{p.get('type', 'branch')} {p.get('name')}" for p in policies)
        if rules_seen != [f"branch {branch}"]:
            problems.append(
                f"its deployment rules are [{', '.join(rules_seen) or 'none'}], not only the branch {branch}"
            )
    return problems


def _branch_policies(client: Github, target: Target) -> list[dict[str, Any]]:
    path = f"/repos/{target.repository}/environments/{PROMOTE_ENVIRONMENT}/deployment-branch-policies"
    policies: list[dict[str, Any]] = []
    page = 1
    while True:
        data = get_json(client, path, {"per_page": POLICIES_PER_PAGE, "page": page})
        policies += data.get("branch_policies") or []
        if len(policies) >= int(data.get("total_count", 0)) or not data.get("branch_policies"):
            return policies
        page += 1


def check_production_environment(target: Target, aws: Aws) -> Iterator[Outcome]:
    branch = target.default_branch
    fix = ENVIRONMENT_FIX.format(branch=branch)
    client = admin_client(target)
    if client is None:
        yield no_admin_token(ENVIRONMENT_CHECK, f"the {PROMOTE_ENVIRONMENT} environment", "Actions: read")
        return
    try:
        environment = get_json(
            client, f"/repos/{target.repository}/environments/{quote(PROMOTE_ENVIRONMENT)}"
        )
        policy = environment.get("deployment_branch_policy") or {}
        policies = _branch_policies(client, target) if policy.get("custom_branch_policies") else []
    except GithubException as error:
        if error.status == 404:
            yield failed(
                ENVIRONMENT_CHECK,
                f"{target.repository} has no environment {PROMOTE_ENVIRONMENT} (promote.yml's job waits in it, "
                "and its MLflow promote credential lives there)",
                f"create it: {fix}",
            )
        else:
            yield failed(
                ENVIRONMENT_CHECK,
                f"reading the {PROMOTE_ENVIRONMENT} environment: GitHub answered {github_message(error)}",
                "a repository admin's GITHUB_TOKEN (gh auth token; fine-grained: Actions: read)",
            )
        return
    finally:
        client.close()
    problems = environment_problems(environment, policies, branch)
    if problems:
        yield failed(ENVIRONMENT_CHECK, f"{PROMOTE_ENVIRONMENT}: {'; '.join(problems)}", fix)
        return
    reviewers = sum(len(r.get("reviewers") or []) for r in environment.get("protection_rules") or [])
    yield passed(
        ENVIRONMENT_CHECK,
        f"{PROMOTE_ENVIRONMENT}: {reviewers} required reviewer(s), none approves their own run; deployable from "
        f"{branch} only",
    )


# ---------------------------------------------------------------------- fork pull requests
def check_fork_approval(target: Target, aws: Aws) -> Iterator[Outcome]:
    client = admin_client(target)
    if client is None:
        yield no_admin_token(FORK_CHECK, "the fork pull request policy", "Administration: read")
        return
    base = f"/repos/{target.repository}"
    try:
        public = not get_json(client, base).get("private", True)
        if public:
            policy = get_json(client, f"{base}/actions/permissions/fork-pr-contributor-approval")
        else:
            policy = get_json(client, f"{base}/actions/permissions/fork-pr-workflows-private-repos")
    except GithubException as error:
        yield failed(
            FORK_CHECK,
            f"reading the fork pull request policy: GitHub answered {github_message(error)}",
            "a repository admin's GITHUB_TOKEN (gh auth token; fine-grained: Administration: read)",
        )
        return
    finally:
        client.close()
    yield _public_outcome(policy) if public else _private_outcome(policy)


def _public_outcome(policy: dict[str, Any]) -> Outcome:
    approval = policy.get("approval_policy")
    if approval != ALL_EXTERNAL:
        return failed(
            FORK_CHECK,
            f"public repository, approval policy {approval}: some outside contributors' fork pull requests run "
            "their workflows unapproved, and one can take a training run's GPU runner",
            PUBLIC_FORK_FIX,
        )
    return passed(
        FORK_CHECK, "public repository: every outside contributor's fork pull request waits for approval"
    )


def _private_outcome(policy: dict[str, Any]) -> Outcome:
    if not policy.get("run_workflows_from_fork_pull_requests"):
        return passed(
            FORK_CHECK,
            "private repository: fork pull requests run no workflows (Run workflows from fork pull requests is "
            "off), so the outside-contributor approval of public repositories does not apply",
        )
    if not policy.get("require_approval_for_fork_pr_workflows"):
        return failed(
            FORK_CHECK,
            "private repository that runs fork pull requests' workflows without approval: one can take a "
            "training run's GPU runner",
            PRIVATE_FORK_FIX,
        )
    return passed(FORK_CHECK, "private repository: fork pull requests' workflows wait for approval")


CHECKS: list[tuple[str, Check]] = [
    (ENVIRONMENT_CHECK, check_production_environment),
    (FORK_CHECK, check_fork_approval),
]
