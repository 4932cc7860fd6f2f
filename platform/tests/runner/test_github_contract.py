"""The GitHub double and client against GitHub's REST description (the platform's gpu_runner_testing/github-openapi.json).

The file is committed so the default run is offline; where npm's `@octokit/openapi` is installed (the version
the file records), it is extracted again and must match. Each planted mismatch below is one the double must not
let through: a response missing a required field, a status the operation does not answer, a request of the
wrong type, a route that is not in the file.
"""

from __future__ import annotations

import json

import pytest
import requests
from github import Auth, Github, GithubException

from gpu_runner.core.errors import RunnerError
from gpu_runner.core.github import GitHubRunners
from gpu_runner_testing import extract_github_openapi as script
from gpu_runner_testing.github_contract import CONTRACT_FILE, Contract, ContractViolation, default_contract
from gpu_runner_testing.github_double import (
    ADMIN_TOKEN,
    ANY_OF_PERMISSIONS,
    DEFAULT_REPOSITORY,
    DEFAULT_TOKEN,
    REQUIRED_PERMISSIONS,
    RUNNERS_TOKEN,
    GitHubDouble,
)
from gpu_runner_testing.github_settings import (
    ADMIN_ROLE_BYPASS,
    DELETION_RULE,
    NON_FAST_FORWARD_RULE,
    Protection,
    setup_guards,
)

RUNNERS_PATH = f"/repos/{DEFAULT_REPOSITORY}/actions/runners"
AUTH = {"Authorization": f"token {DEFAULT_TOKEN}"}


def runners(double: GitHubDouble) -> GitHubRunners:
    return GitHubRunners(
        DEFAULT_REPOSITORY, Auth.Token(DEFAULT_TOKEN), base_url=double.url, backoff_seconds=0.01
    )


# ---------------------------------------------------------------------- the extracted file
def test_committed_file_matches_a_fresh_extraction() -> None:
    package = script.package_dir()
    committed = json.loads(CONTRACT_FILE.read_text())
    if package is None:
        pytest.skip(
            f"{script.PACKAGE} is not installed (npm install {script.PACKAGE}@{committed['source']['version']}, then "
            f"set {script.ENV_PACKAGE_DIR} to its node_modules/{script.PACKAGE}); the committed file is used as is"
        )
    fresh = script.extract(package)
    assert fresh["source"]["version"] == committed["source"]["version"], (
        "the installed package is another version than the committed file records: install the pinned one, or "
        "rerun `python -m gpu_runner_testing.extract_github_openapi` in the template repository to move the pin"
    )
    assert script.render(fresh) == CONTRACT_FILE.read_text(), (
        "rerun `python -m gpu_runner_testing.extract_github_openapi` in the template repository"
    )


def test_the_file_holds_exactly_the_operations_the_script_lists() -> None:
    """Adding an operation to OPERATIONS without extracting again fails here, offline."""
    committed = json.loads(CONTRACT_FILE.read_text())
    assert sorted(committed["operations"]) == sorted(script.OPERATIONS)
    assert committed["source"]["package"] == "@octokit/openapi"
    assert committed["source"]["version"] == "23.0.2"  # the pin: move it with the script, never by hand


def test_every_token_operation_asks_a_permission() -> None:
    """A repository operation the double serves without a permission check would accept any token."""
    token_ops = {op for op, data in default_contract().operations.items() if data.path.startswith("/repos/")}
    token_ops -= {"apps/get-repo-installation"}  # authenticated by the App's JWT, not a token
    assert token_ops == set(REQUIRED_PERMISSIONS) | set(ANY_OF_PERMISSIONS)
    assert not set(REQUIRED_PERMISSIONS) & set(ANY_OF_PERMISSIONS)


# ---------------------------------------------------------------------- planted mismatches
def test_a_response_missing_a_required_field_fails_loudly(github_double: GitHubDouble) -> None:
    runner = github_double.add_runner("gpu-runner-1-1")
    # A runner without `os`, `busy` and `labels`, which the description requires.
    github_double.fail("GET", r"/actions/runners/\d+$", 200, times=10, body={"id": runner["id"], "name": "x"})

    with runners(github_double) as gh, pytest.raises(RunnerError, match="500"):
        gh.get_runner(runner["id"])

    violations = github_double.take_violations()
    assert violations
    assert all("actions/get-self-hosted-runner-for-repo (200)" in v for v in violations)
    assert "'os' is a required property" in violations[0]


def test_a_status_the_operation_does_not_answer_fails_loudly(github_double: GitHubDouble) -> None:
    runner = github_double.add_runner("gpu-runner-1-1")
    github_double.fail("DELETE", r"/actions/runners/\d+$", 200, body={})

    response = requests.delete(f"{github_double.url}{RUNNERS_PATH}/{runner['id']}", headers=AUTH, timeout=5)

    assert response.status_code == 500
    assert github_double.take_violations() == [
        "response of actions/delete-self-hosted-runner-from-repo (200): status 200 is not a documented answer "
        "of actions/delete-self-hosted-runner-from-repo ([204, 422])"
    ]


def test_a_request_of_the_wrong_type_is_refused_and_recorded(github_double: GitHubDouble) -> None:
    response = requests.get(f"{github_double.url}{RUNNERS_PATH}?per_page=ten", headers=AUTH, timeout=5)
    assert response.status_code == 422
    assert github_double.take_violations() == [
        "request to actions/list-self-hosted-runners-for-repo: Invalid query parameter per_page: (root): "
        "'ten' is not of type 'integer'"
    ]
    response = requests.post(
        f"{github_double.url}/repos/{DEFAULT_REPOSITORY}/actions/workflows/train.yml/dispatches",
        json={"inputs": {"attempt": "2"}},
        headers=AUTH,
        timeout=5,
    )
    assert response.status_code == 422
    assert response.json()["message"] == 'Invalid request.\n\n"ref" wasn\'t supplied.'
    assert github_double.take_violations() == [
        'request to actions/create-workflow-dispatch: "ref" wasn\'t supplied.'
    ]
    assert github_double.dispatches == []


def test_a_route_outside_the_file_is_never_served() -> None:
    """What happens when the double gains a route whose operation nobody extracted (here: by removing it)."""
    contract = default_contract().without("actions/get-self-hosted-runner-for-repo")
    double = GitHubDouble(contract=contract).start()
    runner = double.add_runner("gpu-runner-1-1")

    response = requests.get(f"{double.url}{RUNNERS_PATH}/{runner['id']}", headers=AUTH, timeout=5)

    assert response.status_code == 500
    with pytest.raises(ContractViolation, match="a route that is not in the description file"):
        double.stop()


def test_an_unread_violation_fails_the_test_that_caused_it() -> None:
    """The double raises at stop(): a violation no test took cannot pass silently (fixtures stop it)."""
    with (
        pytest.raises(ContractViolation, match=r"Invalid property /runner_group_id"),
        GitHubDouble() as double,
    ):
        requests.post(
            f"{double.url}{RUNNERS_PATH}/generate-jitconfig",
            json={"name": "r", "runner_group_id": "one", "labels": ["r"]},
            headers=AUTH,
            timeout=5,
        )


# ---------------------------------------------------------------------- the client's own requests
def test_the_clients_requests_and_the_doubles_answers_are_all_described(github_double: GitHubDouble) -> None:
    """A whole lifecycle through the real client: every call matched an operation and nothing was refused."""
    github_double.online_after(polls=1)
    with runners(github_double) as gh:
        jit = gh.create_jit_config("gpu-runner-9-1", ["gpu-runner-9-1"])
        gh.wait_until_online(jit.runner.id, timeout_seconds=5)
        assert gh.list_runners(name="gpu-runner-9-1")
        assert gh.delete_runner(jit.runner.id) is True
        assert gh.delete_runner(jit.runner.id) is False

    contract = default_contract()
    seen = {contract.match(c.method, c.path)[0].operation_id for c in github_double.calls}  # type: ignore[index]
    assert seen == {
        "actions/generate-runner-jitconfig-for-repo",
        "actions/get-self-hosted-runner-for-repo",
        "actions/list-self-hosted-runners-for-repo",
        "actions/delete-self-hosted-runner-from-repo",
    }
    assert github_double.take_violations() == []


def test_contract_rejects_what_the_description_rejects() -> None:
    """The checks themselves, without a server: a control that each one can fail."""
    contract = Contract.load()
    op, params = contract.match("POST", f"{RUNNERS_PATH}/generate-jitconfig") or (None, {})
    assert op is not None and params == {"owner": "octo-org", "repo": "octo-repo"}
    good = {"name": "r", "runner_group_id": 1, "labels": ["r"]}
    assert contract.check_request(op, params, {}, good) == []
    assert contract.check_request(op, params, {}, {**good, "labels": ["x"] * 101}) != []
    assert contract.check_request(op, params, {"page": "2"}, good) == [
        "Unknown query parameter 'page' for actions/generate-runner-jitconfig-for-repo."
    ]
    assert contract.check_response(op, 418, {"message": "teapot"}) != []
    assert contract.check_response(op, 503, {"message": "Service Unavailable"}) == []
    assert contract.check_response(op, 503, {"message": 503}) != []
    assert contract.match("GET", "/repos/octo-org/octo-repo/actions/secrets/public-key") is None


def test_compare_answers_from_the_history_as_github_describes_it(github_double: GitHubDouble) -> None:
    """Every compare answer the launch check can meet, through PyGithub, each one checked against the
    description (`commit-comparison`, `basic-error`): status, ahead_by, behind_by, merge base, commits."""
    root = github_double.commit("main")
    m2 = github_double.commit("main")
    x1 = github_double.commit("train/x", parents=[root])
    x2 = github_double.commit("train/x")
    alien = github_double.commit("orphan", parents=[])  # a history of its own (git checkout --orphan)
    client = Github(auth=Auth.Token(DEFAULT_TOKEN), base_url=github_double.url, lazy=True)
    repo = client.get_repo(DEFAULT_REPOSITORY)  # lazy: no GET of the repository, compare is the only call

    answers = {}
    for base, head in ((x2, x2), (x1, x2), (x2, x1), (m2, x2), (root, "main")):
        comparison = repo.compare(base, head, comparison_commits_per_page=1)
        answers[(base, head)] = (
            comparison.status, comparison.ahead_by, comparison.behind_by, comparison.merge_base_commit.sha,
            [c.sha for c in comparison.commits],
        )  # fmt: skip
    assert answers == {
        (x2, x2): ("identical", 0, 0, x2, []),
        (x1, x2): ("ahead", 1, 0, x1, [x2]),
        (x2, x1): ("behind", 0, 1, x1, []),
        (m2, x2): ("diverged", 2, 1, root, [x1, x2]),  # both pages of one commit each
        (root, "main"): ("ahead", 1, 0, root, [m2]),  # a branch name resolves to its head
    }
    for base, message in (("0" * 40, "Not Found"), (alien, f"No common ancestor between {alien} and {x2}.")):
        with pytest.raises(GithubException) as refused:
            _ = repo.compare(base, x2).status
        assert (refused.value.status, refused.value.data["message"]) == (404, message)
    assert github_double.take_violations() == []


# ---------------------------------------------------------------------- the guards gpu-runner doctor reads
def test_the_guards_doctor_reads_are_answered_as_described(github_double: GitHubDouble) -> None:
    """Each setting doctor reads, guarded and weakened, through plain HTTP: every answer checked against the
    description (no violation), and the behaviour the description states: rules of an `evaluate` or `disabled`
    ruleset are not returned, `bypass_actors` only to who may write the ruleset."""
    settings = github_double.settings[DEFAULT_REPOSITORY]
    setup_guards(settings)
    settings.protection["main"] = Protection(bypass_users=("eve",), enforce_admins=False)
    settings.add_ruleset("trial", [DELETION_RULE], enforcement="evaluate")
    settings.add_ruleset("off", [DELETION_RULE], enforcement="disabled")
    org = settings.add_ruleset("org", [NON_FAST_FORWARD_RULE], source_type="Organization",
                               bypass_actors=[ADMIN_ROLE_BYPASS])  # fmt: skip
    base = f"{github_double.url}/repos/{DEFAULT_REPOSITORY}"

    def get(path: str, token: str = ADMIN_TOKEN) -> requests.Response:
        return requests.get(base + path, headers={"Authorization": f"token {token}"}, timeout=5)

    rules = get("/rules/branches/main").json()
    assert [(r["type"], r["ruleset_id"]) for r in rules] == [
        ("pull_request", 1), ("non_fast_forward", 1), ("deletion", 1), ("non_fast_forward", org),
    ]  # fmt: skip
    assert get("/rules/branches/train%2Fx").json() == []  # ~DEFAULT_BRANCH only
    settings.add_ruleset("trains", [DELETION_RULE], include=("refs/heads/train/*",))
    assert [r["ruleset_id"] for r in get("/rules/branches/train%2Fx").json()] == [org + 1]
    del settings.rulesets[org + 1]
    assert "bypass_actors" in get("/rulesets/1").json()
    assert "bypass_actors" not in get(f"/rulesets/{org}").json()  # an organization's: its owners only
    github_double.non_admin_tokens.add(ADMIN_TOKEN)
    assert "bypass_actors" not in get("/rulesets/1").json()
    assert (get("/branches/main/protection").status_code, get("/branches/main/protection").json()["message"]) == (
        404, "Not Found")  # fmt: skip
    github_double.non_admin_tokens.clear()
    protection = get("/branches/main/protection").json()
    assert (
        protection["required_pull_request_reviews"]["bypass_pull_request_allowances"]["users"][0]["login"]
        == "eve"
    )
    assert get("/branches/dev/protection").json()["message"] == "Branch not protected"
    assert get("/actions/permissions/workflow").json()["can_approve_pull_request_reviews"] is False
    environment = get("/environments/production").json()
    assert [r["type"] for r in environment["protection_rules"]] == ["required_reviewers", "branch_policy"]
    assert environment["deployment_branch_policy"] == {
        "protected_branches": False,
        "custom_branch_policies": True,
    }
    assert (
        get("/environments/production/deployment-branch-policies").json()["branch_policies"][0]["name"]
        == "main"
    )
    assert get("/environments/staging").status_code == 404
    assert (
        get("/actions/permissions/fork-pr-workflows-private-repos").json()[
            "run_workflows_from_fork_pull_requests"
        ]
        is False
    )
    settings.public = True
    assert get("").json()["visibility"] == "public"
    assert get("/actions/permissions/fork-pr-contributor-approval").json() == {
        "approval_policy": "first_time_contributors"
    }
    # The runner PAT (Administration write, no Actions permission) may not read the environment.
    assert get("/environments/production", RUNNERS_TOKEN).status_code == 403
    assert github_double.take_violations() == []


def test_a_rule_missing_a_required_parameter_fails_loudly(github_double: GitHubDouble) -> None:
    """The control: a pull_request rule without the parameters the description requires is never served."""
    github_double.settings[DEFAULT_REPOSITORY].add_ruleset(
        "broken", [{"type": "pull_request", "parameters": {"required_approving_review_count": 1}}]
    )
    response = requests.get(
        f"{github_double.url}/repos/{DEFAULT_REPOSITORY}/rules/branches/main",
        headers={"Authorization": f"token {ADMIN_TOKEN}"}, timeout=5,
    )  # fmt: skip
    assert response.status_code == 500
    (violation,) = github_double.take_violations()
    assert violation.startswith(
        "response of repos/get-branch-rules (200): 200 body: /0: no alternative of oneOf"
    )
