"""`gpu-runner doctor`: does a reviewed pull request guard the default branch?

Every credential of this project hangs on "only the default branch's workflows": the roles trust the default
branch's reusable workflows, the GitHub credential's key follows the roles, promote runs from the default branch.
Whoever can put a commit on that branch without someone else's review owns the launch role, the runner
credential and promotion (issue 30, Medium 8). GitHub enforces review in two places, both read with the admin's
token (GITHUB_TOKEN), only with GET:
- rulesets: GET /repos/{o}/{r}/rules/branches/{branch} returns the rules of every active ruleset that applies to
  the branch, of the repository or its organization ("Rules in rulesets with "evaluate" or "disabled"
  enforcement statuses are not returned", says the description: a ruleset on trial guards nothing), each rule
  naming its ruleset, whose bypass list GET /repos/{o}/{r}/rulesets/{id} gives ("the `bypass_actors` property
  is only returned if the user making the API request has write access to the ruleset"). Metadata: read.
- classic branch protection: GET /repos/{o}/{r}/branches/{branch}/protection, Administration: read; 404
  "Branch not protected" when there is none, a bare 404 "Not Found" for a user who is not an admin.
Rules from all of them are aggregated and "the most restrictive version of the rule applies" (docs.github.com
"About rulesets", About rule layering), so each requirement holds when one source holds it against everyone but
admins. And an approval by GitHub Actions counts as a review (GET .../actions/permissions/workflow,
`can_approve_pull_request_reviews`: "Enabling this can be a security risk", the description; the bot's approval
"counts toward branch protection review requirements", github/gh-aw#25439): a branch's workflow would approve its
own pull request.

Fails (✗), each a way for one collaborator to ship a commit nobody else reviewed:
- no pull request with an approving review (a required count of 0 is a pull request nobody has to approve);
- approvals kept after a push (`dismiss_stale_reviews_on_push`: "New, reviewable commits pushed will dismiss
  previous pull request review approvals"): push after the approval, then merge;
- no last-push approval (`require_last_push_approval`: "the most recent reviewable push must be approved by
  someone other than the person who pushed it"): push onto someone else's pull request and approve it;
- force pushes or deletion allowed: rewrite what was reviewed, or delete the branch and push it anew;
- a bypass actor other than the admins: a user, team, app, deploy key or role below admin (mode `always` or
  `exempt`; `pull_request` too for the review rules: it merges a pull request without the review);
- GitHub Actions may approve pull requests; and a source doctor cannot read when the readable ones fall short.
Warns (!), the run still passes:
- admins may bypass (the admin role or organization admins on a ruleset's bypass list; classic protection
  without "Do not allow bypassing the above settings"): an admin may rewrite the rules anyway;
- the only rule for a requirement is in a ruleset whose bypass list this token cannot read (an organization's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from github import Github, GithubException

from gpu_runner.core.aws import Aws
from gpu_runner.doctor.doctor_checks import Check, Outcome, Target, failed, passed, warned
from gpu_runner.doctor.doctor_github import admin_client, get_json, github_message, no_admin_token

CHECK = "default branch protection"
RULES_PER_PAGE, MAX_RULE_PAGES = 100, 10  # the description's per_page maximum; 75 rulesets at most per level
# Ruleset bypass actors that are the admins: the organization admins, and the repository admin role, whose id GitHub
# does not document; 5 as users observed it (maintain 2, write 4: github/rest-api-description#4406 and #7111).
# Any other id counts as a role below admin: a wrong guess fails closed.
ADMIN_ROLE_ID = 5
# Bypass modes that skip a rule on a direct push; `pull_request` only skips it when merging a pull request.
PUSH_BYPASS_MODES = ("always", "exempt")
SETUP = "manual/setup.md, 'Protect the default branch'"
RULESET_FIX = (
    "Settings → Rules → Rulesets → New branch ruleset: Enforcement status Active, target the default branch, "
    "Restrict deletions, Block force pushes, Require a pull request before merging with 1 required approval, "
    "Dismiss stale pull request approvals when new commits are pushed and Require approval of the most recent "
    f"reviewable push ({SETUP})"
)
ACTIONS_APPROVAL_FIX = (
    "Settings → Actions → General → Workflow permissions: untick Allow GitHub Actions to create and approve "
    "pull requests"
)
ADMIN_FIX = "a repository admin's GITHUB_TOKEN (gh auth token; fine-grained: Administration: read)"


@dataclass(frozen=True)
class Source:
    """What one ruleset, or classic branch protection, requires of the branch and who may skip it."""

    name: str
    reviews: int = 0
    dismiss_stale: bool = False
    last_push: bool = False
    no_force_push: bool = False
    no_deletion: bool = False
    review_bypass: tuple[str, ...] = ()  # non-admin actors who may skip its review rules
    push_bypass: tuple[str, ...] = ()  # ... its force-push and deletion rules
    admins_bypass: bool = False
    bypass_unknown: bool = False  # its bypass list could not be read


@dataclass(frozen=True)
class Requirement:
    what: str
    holds: Callable[[Source], bool]
    review: bool  # a pull request rule (bypassed by `pull_request` mode actors too)


REQUIREMENTS = (
    Requirement("a pull request with an approving review", lambda s: s.reviews >= 1, review=True),
    Requirement("approvals dismissed by a new push", lambda s: s.dismiss_stale, review=True),
    Requirement("the last push approved by someone else", lambda s: s.last_push, review=True),
    Requirement("force pushes blocked", lambda s: s.no_force_push, review=False),
    Requirement("deletion blocked", lambda s: s.no_deletion, review=False),
)


@dataclass
class Verdict:
    failures: list[str]
    fixes: list[str]
    warnings: list[str]
    held_by: list[str]


def judge(sources: list[Source]) -> Verdict:
    """Each requirement against the sources that hold it. A requirement held only by sources someone other than
    the admins may skip fails, also when one of them has a bypass list this token cannot read: nothing shows
    that it binds."""
    verdict = Verdict([], [], [], [])
    missing: list[str] = []
    bypassed: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
    unknown: dict[tuple[str, ...], list[str]] = {}
    admins: list[str] = []
    for requirement in REQUIREMENTS:
        holding = [s for s in sources if requirement.holds(s)]
        binding = [s for s in holding if not _bypass(s, requirement) and not s.bypass_unknown]
        if not holding:
            missing.append(requirement.what)
        elif not binding and any(_bypass(s, requirement) for s in holding):
            actors = tuple(sorted({a for s in holding for a in _bypass(s, requirement)}))
            bypassed.setdefault((actors, tuple(s.name for s in holding)), []).append(requirement.what)
        elif not binding:
            unknown.setdefault(tuple(s.name for s in holding), []).append(requirement.what)
        elif all(s.admins_bypass for s in binding):
            admins.append(requirement.what)
        verdict.held_by += [s.name for s in binding if s.name not in verdict.held_by]
    if missing:
        verdict.failures.append(f"nothing enforces {_join(missing)}")
        verdict.fixes.append(RULESET_FIX)
    for (actors, names), whats in bypassed.items():
        verdict.failures.append(f"{_join(list(actors))} may bypass every rule enforcing {_join(whats)}")
        verdict.fixes.append(f"remove {_join(list(actors))} from the bypass list of {_join(list(names))}")
    for names, whats in unknown.items():
        verdict.warnings.append(
            f"{_join(list(names))} alone enforce {_join(whats)}, and this token may not read who may bypass it"
        )
    if admins:
        verdict.warnings.append(f"admins may bypass {_join(admins)}")
    return verdict


def _bypass(source: Source, requirement: Requirement) -> tuple[str, ...]:
    return source.review_bypass if requirement.review else source.push_bypass


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------------- reading the sources
def _ruleset_sources(client: Github, target: Target, branch: str) -> list[Source]:
    """The active rules for the branch, grouped by their ruleset, each with its ruleset's bypass list."""
    path = f"/repos/{target.repository}/rules/branches/{quote(branch, safe='')}"
    rules: list[dict[str, Any]] = []
    for page in range(1, MAX_RULE_PAGES + 1):
        chunk = get_json(client, path, {"per_page": RULES_PER_PAGE, "page": page})
        rules += chunk
        if len(chunk) < RULES_PER_PAGE:
            break
    by_ruleset: dict[int, list[dict[str, Any]]] = {}
    for rule in rules:
        by_ruleset.setdefault(int(rule.get("ruleset_id") or 0), []).append(rule)
    return [_ruleset_source(client, target, ruleset_id, found) for ruleset_id, found in by_ruleset.items()]


def _ruleset_source(client: Github, target: Target, ruleset_id: int, rules: list[dict[str, Any]]) -> Source:
    types = {rule["type"] for rule in rules}
    review = next((rule.get("parameters") or {} for rule in rules if rule["type"] == "pull_request"), None)
    try:
        ruleset = get_json(client, f"/repos/{target.repository}/rulesets/{ruleset_id}")
    except GithubException as error:
        if error.status != 404:
            raise
        ruleset = {}  # e.g. an organization's ruleset this token may not see: its bypass list is unknown
    where = rules[0].get("ruleset_source") or target.repository
    name = f"ruleset '{ruleset.get('name', ruleset_id)}' (id {ruleset_id}, {where})"
    actors = ruleset.get("bypass_actors")
    admins, review_bypass, push_bypass = _bypass_actors(actors or [])
    return Source(
        name=name,
        reviews=int((review or {}).get("required_approving_review_count", 0)),
        dismiss_stale=bool((review or {}).get("dismiss_stale_reviews_on_push")),
        last_push=bool((review or {}).get("require_last_push_approval")),
        no_force_push="non_fast_forward" in types,
        no_deletion="deletion" in types,
        review_bypass=review_bypass,
        push_bypass=push_bypass,
        admins_bypass=admins,
        bypass_unknown=actors is None,
    )


def _bypass_actors(actors: list[dict[str, Any]]) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
    """(admins may bypass, the others who may skip the review rules, the others who may push past the rest)."""
    admins, review, push = False, [], []
    for actor in actors:
        kind, ident = actor.get("actor_type", "?"), actor.get("actor_id")
        mode = actor.get("bypass_mode") or "always"  # the description's default
        if kind == "OrganizationAdmin" or (kind == "RepositoryRole" and ident == ADMIN_ROLE_ID):
            admins = True
            continue
        described = f"{kind} {ident} ({mode})" if ident is not None else f"{kind} ({mode})"
        review.append(described)
        if mode in PUSH_BYPASS_MODES:
            push.append(described)
    return admins, tuple(review), tuple(push)


def _classic_source(client: Github, target: Target, branch: str) -> Source | str | None:
    """Classic protection as a Source, None when the branch has none, or why it could not be read."""
    path = f"/repos/{target.repository}/branches/{quote(branch, safe='')}/protection"
    try:
        protection = get_json(client, path)
    except GithubException as error:
        message = error.data.get("message") if isinstance(error.data, dict) else None
        if error.status == 404 and message == "Branch not protected":
            return None
        return f"its branch protection could not be read (GitHub answered {github_message(error)})"
    reviews = protection.get("required_pull_request_reviews") or {}
    allowances = reviews.get("bypass_pull_request_allowances") or {}
    bypass = (
        [f"User {u.get('login')}" for u in allowances.get("users") or []]
        + [f"Team {t.get('slug')}" for t in allowances.get("teams") or []]
        + [f"App {a.get('slug')}" for a in allowances.get("apps") or []]
    )
    # A setting missing from the answer counts as the weaker one.
    return Source(
        name="branch protection",
        reviews=int(reviews.get("required_approving_review_count", 0)),
        dismiss_stale=bool(reviews.get("dismiss_stale_reviews")),
        last_push=bool(reviews.get("require_last_push_approval")),
        no_force_push=not (protection.get("allow_force_pushes") or {}).get("enabled", True),
        no_deletion=not (protection.get("allow_deletions") or {}).get("enabled", True),
        review_bypass=tuple(bypass),
        admins_bypass=not (protection.get("enforce_admins") or {}).get("enabled", False),
    )


def _actions_may_approve(client: Github, target: Target) -> bool | str:
    """Whether GitHub Actions may approve pull requests, or why it could not be read."""
    try:
        data = get_json(client, f"/repos/{target.repository}/actions/permissions/workflow")
    except GithubException as error:
        return f"whether GitHub Actions may approve pull requests could not be read ({github_message(error)})"
    return bool(data.get("can_approve_pull_request_reviews"))


# ---------------------------------------------------------------------- the check
def check_default_branch_protection(target: Target, aws: Aws) -> Iterator[Outcome]:
    branch = target.default_branch
    client = admin_client(target)
    if client is None:
        yield no_admin_token(CHECK, f"what guards {branch}", "Administration: read")
        return
    try:
        sources = _ruleset_sources(client, target, branch)
        classic = _classic_source(client, target, branch)
        actions = _actions_may_approve(client, target)
    finally:
        client.close()
    every = [*sources, *([classic] if isinstance(classic, Source) else [])]
    verdict = judge(every)
    if isinstance(classic, str) and verdict.failures:  # classic protection might hold what the rulesets lack
        verdict.failures.append(classic)
        verdict.fixes.append(f"run doctor with {ADMIN_FIX}")
    if isinstance(actions, str):
        verdict.failures.append(actions)
        verdict.fixes.append(f"run doctor with {ADMIN_FIX}")
    elif actions:
        verdict.failures.append(
            "GitHub Actions may approve pull requests (a branch's workflow approves its own)"
        )
        verdict.fixes.append(ACTIONS_APPROVAL_FIX)
    if verdict.failures:
        also = f"; also: {'; '.join(verdict.warnings)}" if verdict.warnings else ""
        fixes = verdict.fixes + ([_warning_fix(verdict)] if verdict.warnings else [])
        yield failed(CHECK, f"{branch}: {'; '.join(verdict.failures)}{also}", "; ".join(fixes))
        return
    held = (
        f"{branch} needs a pull request with {max(s.reviews for s in every)} approving review(s), approvals "
        "dismissed by a new push, the last push approved by someone else, no force push, no deletion "
        f"({_join(verdict.held_by or [s.name for s in every])}); GitHub Actions cannot approve pull requests"
    )
    if verdict.warnings:
        yield warned(CHECK, f"{held}; but {'; '.join(verdict.warnings)}", _warning_fix(verdict))
        return
    yield passed(CHECK, held)


def _warning_fix(verdict: Verdict) -> str:
    fixes = []
    if any(w.startswith("admins may bypass") for w in verdict.warnings):
        fixes.append(
            "to hold admins too: remove the admin role from the ruleset's bypass list, or tick Do not allow "
            "bypassing the above settings in the classic rule"
        )
    if any("may not read who may bypass" in w for w in verdict.warnings):
        fixes.append("an organization owner confirms that ruleset's bypass list holds admins only")
    return "; ".join(fixes)


CHECKS: list[tuple[str, Check]] = [(CHECK, check_default_branch_protection)]
