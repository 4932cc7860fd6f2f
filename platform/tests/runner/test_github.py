"""gpu_runner.core.github with real PyGithub over real HTTP against the local GitHub double."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import jwt
import pytest
import requests
from github import Auth

from gpu_runner.core.errors import RegistrationTimeout, RunnerError, SettingsError
from gpu_runner.core.github import GitHubRunners, JitConfig, Runner, dispatch_workflow
from gpu_runner_testing.github_double import (
    DEFAULT_CLIENT_ID,
    DEFAULT_REPOSITORY,
    DEFAULT_TOKEN,
    READ_ONLY_TOKEN,
    RUNNERS_TOKEN,
    WORKFLOW_TOKEN,
    GitHubDouble,
    app_private_key_pem,
    decode_jit_config,
)

RUNNERS_PATH = f"/repos/{DEFAULT_REPOSITORY}/actions/runners"
JIT_PATH = f"{RUNNERS_PATH}/generate-jitconfig"
NAME = "gpu-runner-777-1"


def client(double: GitHubDouble, token: str = DEFAULT_TOKEN, **options: object) -> GitHubRunners:
    options = {"backoff_seconds": 0.01, "busy_timeout_seconds": 5.0, **options}
    return GitHubRunners(DEFAULT_REPOSITORY, Auth.Token(token), base_url=double.url, **options)  # type: ignore[arg-type]


@pytest.fixture
def gh(github_double: GitHubDouble) -> Iterator[GitHubRunners]:
    with client(github_double) as runners:
        yield runners


# ---------------------------------------------------------------------- registration
def test_jit_config_registers_a_runner_with_its_unique_name_and_label(
    gh: GitHubRunners, github_double: GitHubDouble
) -> None:
    jit = gh.create_jit_config(NAME, [NAME])

    assert jit.runner == Runner(id=jit.runner.id, name=NAME, status="offline", busy=False, labels=(NAME,))
    assert github_double.issued_jit_configs[NAME] == jit.encoded_jit_config
    assert decode_jit_config(jit.encoded_jit_config)[".runner"]["AgentName"] == NAME
    body = {"name": NAME, "runner_group_id": 1, "labels": [NAME], "work_folder": "_work"}
    assert github_double.calls == [("POST", JIT_PATH, {}, body, 201)]
    assert github_double.runners[jit.runner.id]["ephemeral"] is True


def test_duplicate_runner_name_is_a_clear_error(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    first = gh.create_jit_config(NAME, [NAME])
    with pytest.raises(RunnerError, match=rf"'{NAME}' already exists .*id {first.runner.id}, offline"):
        gh.create_jit_config(NAME, [NAME])
    assert [c.status for c in github_double.calls if c.path == JIT_PATH] == [201, 409]


def test_labels_are_required(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    with pytest.raises(RunnerError, match="at least one label"):
        gh.create_jit_config(NAME, [])
    assert github_double.calls == []
    # GitHub itself refuses an empty label list, and so does the double.
    response = requests.post(
        github_double.url + JIT_PATH,
        json={"name": NAME, "runner_group_id": 1, "labels": []},
        headers={"Authorization": f"Bearer {DEFAULT_TOKEN}"},
        timeout=5,
    )
    assert response.status_code == 422
    assert github_double.take_violations() == [
        "request to actions/generate-runner-jitconfig-for-repo: Invalid property /labels: [] should be non-empty."
    ]


def test_jit_config_repr_hides_the_secret(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    jit = gh.create_jit_config(NAME, [NAME])
    secret = decode_jit_config(jit.encoded_jit_config)[".credentials_rsaparams"]["d"]
    for text in (repr(jit), str(jit), repr([jit])):
        assert jit.encoded_jit_config not in text and secret not in text
        assert NAME in text
    assert JitConfig(jit.runner, "s3cr3t").__repr__().count("s3cr3t") == 0


# ---------------------------------------------------------------------- listing and lookup
def test_list_follows_every_page_and_filters_by_name(github_double: GitHubDouble) -> None:
    names = [f"gpu-runner-{n}-1" for n in range(7)]
    with client(github_double, per_page=3) as gh:
        created = [gh.create_jit_config(name, [name]).runner for name in names]
        github_double.clear_calls()

        listed = gh.list_runners()
        assert listed == created
        pages = [c for c in github_double.calls if c.path == RUNNERS_PATH]
        assert [(c.query.get("page", "1"), c.query["per_page"], c.status) for c in pages] == [
            ("1", "3", 200),
            ("2", "3", 200),
            ("3", "3", 200),
        ]

        github_double.clear_calls()
        assert gh.list_runners(name=names[4]) == [created[4]]
        assert gh.list_runners(name="gpu-runner-unknown") == []
        assert [c.query["name"] for c in github_double.calls] == [names[4], "gpu-runner-unknown"]


def test_get_runner_and_404_is_none(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    jit = gh.create_jit_config(NAME, [NAME, "gpu"])
    assert gh.get_runner(jit.runner.id) == jit.runner
    assert gh.get_runner(999_999) is None
    statuses = [(c.method, c.path, c.status) for c in github_double.calls]
    assert ("GET", f"{RUNNERS_PATH}/999999", 404) in statuses


def test_404_from_a_wrong_repository_is_not_mistaken_for_a_missing_runner(
    github_double: GitHubDouble,
) -> None:
    auth = Auth.Token(DEFAULT_TOKEN)
    with GitHubRunners("octo-org/typo", auth, base_url=github_double.url, backoff_seconds=0.01) as gh:
        with pytest.raises(RunnerError, match=r"octo-org/typo was not found .*installed on the repository"):
            gh.get_runner(23)
        with pytest.raises(RunnerError, match="octo-org/typo was not found"):
            gh.list_runners()
        with pytest.raises(RunnerError, match="octo-org/typo is wrong or not visible"):
            gh.create_jit_config(NAME, [NAME])


# ---------------------------------------------------------------------- deletion
def test_delete_returns_true_then_false_once_gone(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    runner_id = gh.create_jit_config(NAME, [NAME]).runner.id
    assert gh.delete_runner(runner_id) is True
    assert runner_id not in github_double.runners
    assert gh.delete_runner(runner_id) is False
    deletes = [c.status for c in github_double.calls if c.method == "DELETE"]
    assert deletes == [204, 404]


def test_delete_waits_while_the_runner_is_busy(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    runner_id = gh.create_jit_config(NAME, [NAME]).runner.id
    github_double.stay_busy_for(runner_id, delete_attempts=2)

    assert gh.delete_runner(runner_id) is True

    deletes = [c for c in github_double.calls if c.method == "DELETE"]
    assert [(c.path, c.status) for c in deletes] == [
        (f"{RUNNERS_PATH}/{runner_id}", s) for s in (422, 422, 204)
    ]


def test_delete_gives_up_on_a_runner_that_stays_busy(github_double: GitHubDouble) -> None:
    with client(github_double, busy_timeout_seconds=0.3) as gh:
        runner_id = gh.create_jit_config(NAME, [NAME]).runner.id
        github_double.set_status(runner_id, "online", busy=True)
        started = time.monotonic()
        with pytest.raises(RunnerError, match=f"runner {runner_id} is still busy .*a job is running"):
            gh.delete_runner(runner_id)
    assert time.monotonic() - started < 10  # gave up on its 0.3 s budget, not the 300 s default
    assert runner_id in github_double.runners
    assert len([c for c in github_double.calls if c.method == "DELETE"]) >= 2


# ---------------------------------------------------------------------- transient failures and rate limits
def test_server_errors_are_retried_transparently(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    github_double.fail("POST", "generate-jitconfig$", 500)
    github_double.fail("POST", "generate-jitconfig$", 502)
    jit = gh.create_jit_config(NAME, [NAME])
    assert [c.status for c in github_double.calls] == [500, 502, 201]

    github_double.fail("GET", "/actions/runners$", 503)
    github_double.fail("GET", "/actions/runners$", 504)
    assert gh.list_runners() == [jit.runner]
    github_double.fail("DELETE", r"/actions/runners/\d+$", 502)
    assert gh.delete_runner(jit.runner.id) is True


def test_a_lasting_outage_fails_with_the_status(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    github_double.fail("GET", "/actions/runners$", 502, times=10)
    with pytest.raises(RunnerError, match="listing runners: GitHub answered 502 after 4 attempts"):
        gh.list_runners()
    assert len(github_double.calls) == 4


def test_secondary_rate_limit_honours_retry_after(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    github_double.fail(
        "GET",
        "/actions/runners$",
        403,
        headers={"Retry-After": "1"},
        body={
            "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
        },
    )
    started = time.monotonic()
    assert gh.list_runners() == []
    assert time.monotonic() - started >= 0.9
    assert [c.status for c in github_double.calls] == [403, 200]


def test_rate_limit_headers_and_json_on_every_response(github_double: GitHubDouble) -> None:
    for headers in ({}, {"Authorization": f"token {DEFAULT_TOKEN}"}):
        response = requests.get(github_double.url + RUNNERS_PATH, headers=headers, timeout=5)
        assert response.headers["Content-Type"].startswith("application/json")
        assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-used"} <= {
            key.lower() for key in response.headers
        }
    assert [c.status for c in github_double.calls] == [401, 200]


# ---------------------------------------------------------------------- credentials
def test_bad_token_is_a_clear_error_without_the_token(github_double: GitHubDouble) -> None:
    with client(github_double, token="github_pat_wrong") as gh, pytest.raises(RunnerError) as raised:
        gh.list_runners()
    message = str(raised.value)
    assert "401 Bad credentials" in message and "GPU_RUNNER_TOKEN" in message
    assert "github_pat_wrong" not in message


def test_missing_administration_permission_says_which(github_double: GitHubDouble) -> None:
    with client(github_double, token=READ_ONLY_TOKEN) as gh:
        assert gh.list_runners() == []  # reading needs only Administration: read
        with pytest.raises(
            RunnerError, match=r"403 .*'Administration: write' on octo-org/octo-repo .*GITHUB_TOKEN"
        ):
            gh.create_jit_config(NAME, [NAME])


def test_from_env_with_a_pat(github_double: GitHubDouble) -> None:
    env = {"GPU_RUNNER_TOKEN": DEFAULT_TOKEN, "GITHUB_API_URL": github_double.url}
    with GitHubRunners.from_env(DEFAULT_REPOSITORY, env=env, backoff_seconds=0.01) as gh:
        gh.create_jit_config(NAME, [NAME])
    assert [(r.path, r.scheme, r.credential) for r in github_double.requests] == [
        (JIT_PATH, "token", DEFAULT_TOKEN)
    ]


def app_env(github_double: GitHubDouble) -> dict[str, str]:
    """The GitHub App credentials the workflows pass, pointing at the double."""
    return {
        "GPU_RUNNER_APP_ID": str(github_double.app_id),
        "GPU_RUNNER_APP_PRIVATE_KEY": app_private_key_pem(),
        "GITHUB_API_URL": github_double.url,
    }


def test_from_env_with_a_github_app_exchanges_a_jwt_for_an_installation_token(
    github_double: GitHubDouble,
) -> None:
    env = app_env(github_double)
    with GitHubRunners.from_env(DEFAULT_REPOSITORY, env=env, backoff_seconds=0.01) as gh:
        jit = gh.create_jit_config(NAME, [NAME])
        assert gh.delete_runner(jit.runner.id) is True

    installation = github_double.installation_ids[DEFAULT_REPOSITORY]
    seen = [(r.method, r.path, r.status, r.scheme) for r in github_double.requests]
    assert seen == [
        ("GET", f"/repos/{DEFAULT_REPOSITORY}/installation", 200, "bearer"),
        ("POST", f"/app/installations/{installation}/access_tokens", 201, "bearer"),
        ("POST", JIT_PATH, 201, "token"),
        ("DELETE", f"{RUNNERS_PATH}/{jit.runner.id}", 204, "token"),
    ]
    (issued,) = github_double.installation_tokens
    assert issued.startswith("ghs_")
    assert {r.credential for r in github_double.requests[2:]} == {issued}  # one token, reused


def test_the_installation_token_and_the_jit_config_are_masked_in_the_workflow_log(
    github_double: GitHubDouble, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 13 item 11: a backstop should anything print them: `::add-mask::` for each secret as it arrives,
    before the first request that uses the token; nothing outside GitHub Actions."""
    with GitHubRunners.from_env(DEFAULT_REPOSITORY, env=app_env(github_double), backoff_seconds=0.01) as gh:
        gh.create_jit_config(NAME, [NAME])
    assert "::add-mask::" not in capsys.readouterr().out
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    with GitHubRunners.from_env(DEFAULT_REPOSITORY, env=app_env(github_double), backoff_seconds=0.01) as gh:
        jit = gh.create_jit_config(f"{NAME}-2", [f"{NAME}-2"])
    lines = capsys.readouterr().out.splitlines()
    masked = [line.removeprefix("::add-mask::") for line in lines if line.startswith("::add-mask::")]
    assert masked == [list(github_double.installation_tokens)[-1], jit.encoded_jit_config]


def test_app_with_a_foreign_key_is_refused(github_double: GitHubDouble) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    env = {"GPU_RUNNER_APP_ID": str(github_double.app_id), "GPU_RUNNER_APP_PRIVATE_KEY": other.decode()}
    env["GITHUB_API_URL"] = github_double.url
    with pytest.raises(SettingsError, match="rejected the App's JWT"):
        GitHubRunners.from_env(DEFAULT_REPOSITORY, env=env, backoff_seconds=0.01)
    assert [c.status for c in github_double.calls] == [401]
    assert github_double.installation_tokens == {}


def test_app_not_installed_on_the_repository(github_double: GitHubDouble) -> None:
    env = {
        "GPU_RUNNER_APP_ID": str(github_double.app_id),
        # A one-line variable with literal \n, as some secret stores keep a PEM.
        "GPU_RUNNER_APP_PRIVATE_KEY": app_private_key_pem().replace("\n", "\\n"),
        "GITHUB_API_URL": github_double.url,
    }
    with pytest.raises(SettingsError, match="not installed on octo-org/elsewhere"):
        GitHubRunners.from_env("octo-org/elsewhere", env=env, backoff_seconds=0.01)
    assert [c.status for c in github_double.calls] == [404]


def test_from_env_without_credentials_names_what_to_set() -> None:
    with pytest.raises(SettingsError) as raised:
        GitHubRunners.from_env(DEFAULT_REPOSITORY, env={"GITHUB_TOKEN": "ghs_default"})
    message = str(raised.value)
    for needed in ("GPU_RUNNER_TOKEN", "GPU_RUNNER_APP_ID", "GPU_RUNNER_APP_PRIVATE_KEY", "GITHUB_TOKEN"):
        assert needed in message
    assert "Administration: write" in message
    with pytest.raises(SettingsError, match="GPU_RUNNER_APP_PRIVATE_KEY is not set"):
        GitHubRunners.from_env(DEFAULT_REPOSITORY, env={"GPU_RUNNER_APP_ID": "1"})
    with pytest.raises(SettingsError, match="owner/name"):
        GitHubRunners.from_env("not a repo", env={"GPU_RUNNER_TOKEN": "x"})


# ---------------------------------------------------------------------- waiting for registration
def test_wait_until_online_polls_until_the_runner_connects(
    gh: GitHubRunners, github_double: GitHubDouble
) -> None:
    runner_id = gh.create_jit_config(NAME, [NAME]).runner.id
    github_double.online_after(runner_id, polls=3)
    polls: list[tuple[float, Runner | None]] = []

    runner = gh.wait_until_online(runner_id, timeout_seconds=10, on_poll=lambda t, r: polls.append((t, r)))

    assert runner.status == "online" and runner.name == NAME
    assert [r.status for _, r in polls if r] == ["offline", "offline", "offline", "online"]
    assert [t for t, _ in polls] == sorted(t for t, _ in polls)


def test_wait_until_online_after_a_boot_delay(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    # The double's clock starts at online_after, so ours must start before it: a lower bound on the wait.
    started = time.monotonic()
    github_double.online_after(NAME, seconds=0.2)  # by name, before the runner exists
    runner_id = gh.create_jit_config(NAME, [NAME]).runner.id
    assert gh.wait_until_online(runner_id, timeout_seconds=10).status == "online"
    assert time.monotonic() - started >= 0.2


def test_wait_until_online_times_out(gh: GitHubRunners, github_double: GitHubDouble) -> None:
    runner_id = gh.create_jit_config(NAME, [NAME]).runner.id
    started = time.monotonic()
    with pytest.raises(RegistrationTimeout, match=f"runner {runner_id} did not come online .*'offline'"):
        gh.wait_until_online(runner_id, timeout_seconds=0.3)
    assert 0.3 <= time.monotonic() - started < 10  # its 0.3 s budget, not the default


def test_debug_logging_never_shows_a_secret(
    github_double: GitHubDouble, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="github")  # PyGithub pins its logger to INFO unless asked
    env = app_env(github_double)
    with GitHubRunners.from_env(DEFAULT_REPOSITORY, env=env, backoff_seconds=0.01) as gh:
        jit = gh.create_jit_config(NAME, [NAME])
    with client(github_double) as gh:
        gh.get_runner(jit.runner.id)

    assert "generate-jitconfig" in caplog.text  # PyGithub did log the calls...
    (installation_token,) = github_double.installation_tokens
    for secret in (jit.encoded_jit_config, installation_token, DEFAULT_TOKEN, "PRIVATE KEY"):
        assert secret not in caplog.text  # ...but none of the credentials


def test_a_broken_app_key_is_a_settings_error(github_double: GitHubDouble) -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nbm90IGEga2V5\n-----END RSA PRIVATE KEY-----"
    env = {"GPU_RUNNER_APP_ID": "1", "GPU_RUNNER_APP_PRIVATE_KEY": pem, "GITHUB_API_URL": github_double.url}
    with pytest.raises(SettingsError, match="GPU_RUNNER_APP_PRIVATE_KEY could not be loaded") as raised:
        GitHubRunners.from_env(DEFAULT_REPOSITORY, env=env)
    assert "bm90IGEga2V5" not in str(raised.value)
    assert github_double.calls == []


# ---------------------------------------------------------------------- workflow_dispatch (resume after spot)
def dispatch(double: GitHubDouble, token: str = WORKFLOW_TOKEN, workflow: str = "train.yml") -> str | None:
    inputs = {"attempt": "2", "commit": "c" * 40}
    return dispatch_workflow(DEFAULT_REPOSITORY, workflow, "train/demo", inputs, token, double.url, 0.01)


def test_dispatch_starts_the_run_and_returns_its_url(github_double: GitHubDouble) -> None:
    url = dispatch(github_double)

    (run_id,) = github_double.dispatched_runs
    assert url == f"https://github.com/{DEFAULT_REPOSITORY}/actions/runs/{run_id}"
    assert github_double.dispatches == [
        {"workflow": "train.yml", "ref": "train/demo", "inputs": {"attempt": "2", "commit": "c" * 40}}
    ]
    assert [(c.method, c.path, c.status) for c in github_double.calls] == [
        ("POST", f"/repos/{DEFAULT_REPOSITORY}/actions/workflows/train.yml/dispatches", 200)
    ]


def test_dispatch_answers_as_the_description_says(github_double: GitHubDouble) -> None:
    """204 and no body without `return_run_details` (API version 2022-11-28), 200 with the run's ids with it."""
    url = f"{github_double.url}/repos/{DEFAULT_REPOSITORY}/actions/workflows/train.yml/dispatches"
    headers = {"Authorization": f"Bearer {WORKFLOW_TOKEN}"}
    plain = requests.post(url, json={"ref": "main"}, headers=headers, timeout=5)
    detailed = requests.post(
        url, json={"ref": "main", "return_run_details": True}, headers=headers, timeout=5
    )

    assert (plain.status_code, plain.content) == (204, b"")
    assert detailed.status_code == 200
    assert set(detailed.json()) == {"workflow_run_id", "run_url", "html_url"}
    assert detailed.json()["workflow_run_id"] == github_double.dispatched_runs[0]


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (None, r"GitHub answered 404 Not Found \(octo-org/octo-repo has no workflow nope.yml"),
        (
            (422, "Workflow does not have 'workflow_dispatch' trigger"),
            r"GitHub answered 422 Workflow does not have 'workflow_dispatch' trigger \(train/demo does not exist",
        ),
        (
            (503, "Service Unavailable"),
            r"GitHub answered 503 Service Unavailable \(still failing after 4 attempts",
        ),
    ],
    ids=["404-unknown-workflow", "422-no-trigger", "503-after-retries"],
)
def test_a_refused_dispatch_raises_with_githubs_status_and_message(
    github_double: GitHubDouble, fault: tuple[int, str] | None, expected: str
) -> None:
    workflow = "nope.yml" if fault is None else "train.yml"
    if fault is not None:
        status, message = fault
        body = {"message": message, "documentation_url": "https://docs.github.com/rest"}
        github_double.fail("POST", "/dispatches$", status, times=10, body=body)

    with pytest.raises(RunnerError, match=expected):
        dispatch(github_double, workflow=workflow)
    assert github_double.dispatches == []
    assert len(github_double.calls) == (4 if fault and fault[0] >= 500 else 1)


def test_dispatch_needs_actions_write_not_administration(github_double: GitHubDouble) -> None:
    """Attacker view: the runner-managing PAT (Administration: write) cannot start workflows, and the workflow's
    GITHUB_TOKEN (Actions: write) cannot register runners."""
    with pytest.raises(
        RunnerError, match=r"403 Resource not accessible by personal access token .*actions: write"
    ):
        dispatch(github_double, token=RUNNERS_TOKEN)
    (refused,) = github_double.calls
    assert refused.status == 403 and github_double.dispatches == []
    response = requests.post(
        f"{github_double.url}/repos/{DEFAULT_REPOSITORY}/actions/workflows/train.yml/dispatches",
        json={"ref": "main"},
        headers={"Authorization": f"token {RUNNERS_TOKEN}"},
        timeout=5,
    )
    assert response.headers["X-Accepted-GitHub-Permissions"] == "actions=write"

    with (
        client(github_double, token=WORKFLOW_TOKEN) as gh,
        pytest.raises(RunnerError, match="403 Resource not"),
    ):
        gh.create_jit_config(NAME, [NAME])
    assert dispatch(github_double, token=WORKFLOW_TOKEN)


# ---------------------------------------------------------------------- generate-jitconfig body types
@pytest.mark.parametrize(
    ("field", "value", "line"),
    [
        ("runner_group_id", "1", 'Invalid property /runner_group_id: "1" is not of type integer.'),
        ("runner_group_id", 1.5, "Invalid property /runner_group_id: 1.5 is not of type integer."),
        ("runner_group_id", True, "Invalid property /runner_group_id: true is not of type integer."),
        ("work_folder", 7, "Invalid property /work_folder: 7 is not of type string."),
        ("work_folder", None, "Invalid property /work_folder: null is not of type string."),
    ],
)
def test_generate_jitconfig_refuses_wrong_types_as_github_does(
    github_double: GitHubDouble, field: str, value: object, line: str
) -> None:
    body = {"name": NAME, "runner_group_id": 1, "labels": [NAME], "work_folder": "_work", field: value}
    response = requests.post(
        github_double.url + JIT_PATH,
        json=body,
        headers={"Authorization": f"token {DEFAULT_TOKEN}"},
        timeout=5,
    )

    assert response.status_code == 422
    assert response.json() == {
        "message": f"Invalid request.\n\n{line}",
        "errors": [line],
        "documentation_url": "https://docs.github.com/rest/actions/self-hosted-runners"
        "#create-configuration-for-a-just-in-time-runner-for-a-repository",
        "status": "422",
    }
    assert github_double.runners == {}
    assert github_double.take_violations() == [
        f"request to actions/generate-runner-jitconfig-for-repo: {line}"
    ]


# ---------------------------------------------------------------------- pagination limits
@pytest.mark.parametrize(
    ("per_page", "served"), [("0", 30), ("-5", 30), ("1", 1), ("100", 100), ("101", 100), ("1000", 100)]
)
def test_per_page_outside_1_to_100_is_answered_as_github_does(
    github_double: GitHubDouble, per_page: str, served: int
) -> None:
    """Above 100: reduced to 100, no error; 0 or negative: the default 30 (see PER_PAGE_MAX in the double)."""
    for n in range(120):
        github_double.add_runner(f"gpu-runner-{n}-1")
    response = requests.get(
        f"{github_double.url}{RUNNERS_PATH}?per_page={per_page}",
        headers={"Authorization": f"token {DEFAULT_TOKEN}"},
        timeout=5,
    )

    assert response.status_code == 200
    assert response.json()["total_count"] == 120
    assert len(response.json()["runners"]) == served
    assert f"per_page={served}&page=2" in response.headers["Link"]


# ---------------------------------------------------------------------- GitHub App JWT rules
def app_jwt(double: GitHubDouble, iat: float, exp: float, iss: object = None) -> str:
    claims = {"iat": int(iat), "exp": int(exp), "iss": str(double.app_id) if iss is None else iss}
    return jwt.encode(claims, app_private_key_pem(), algorithm="RS256")


@pytest.mark.parametrize(
    ("iat", "exp", "iss", "status", "message"),
    [
        (-60, 300, None, 200, None),  # what PyGithub sends: iat backdated 60 s, 5 minutes
        (-60, 595, None, 200, None),
        (0, 595, DEFAULT_CLIENT_ID, 200, None),  # the client id is an accepted issuer (GitHub recommends it)
        (0, 650, None, 401, "'Expiration time' claim ('exp') is too far in the future"),
        (-300, 3600, None, 401, "'Expiration time' claim ('exp') is too far in the future"),
        (120, 300, None, 401, "'Issued at' claim ('iat') must be an Integer"),
        (
            -700,
            -10,
            None,
            401,
            "'Expiration time' claim ('exp') must be a numeric value representing the future",
        ),
        (-60, 300, "1", 401, "Integration not found"),
    ],
    ids=[
        "pygithub",
        "just-under-10-min",
        "client-id",
        "exp-650s",
        "exp-1h",
        "iat-future",
        "expired",
        "other-app",
    ],
)
def test_app_jwt_follows_githubs_claim_rules(
    github_double: GitHubDouble, iat: int, exp: int, iss: object, status: int, message: str | None
) -> None:
    now = time.time()
    response = requests.get(
        f"{github_double.url}/repos/{DEFAULT_REPOSITORY}/installation",
        headers={"Authorization": f"Bearer {app_jwt(github_double, now + iat, now + exp, iss)}"},
        timeout=5,
    )
    assert response.status_code == status, response.text
    if message:
        assert response.json()["message"].startswith(message)
    else:
        assert response.json()["app_id"] == github_double.app_id
