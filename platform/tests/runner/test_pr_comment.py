"""The pull-request comment: its body from real MLflow runs (the session's tracking server), and the one comment
kept on the branch's open pull request in the GitHub double (held to GitHub's REST description): created once,
then edited in place; a human's comment with the marker, a fork's pull request and a refused token left alone."""

from __future__ import annotations

import re
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from gpu_runner.cli import main
from gpu_runner.core.mlflow_rest import MlflowRest
from gpu_runner.pr_comment import pr_report
from gpu_runner.pr_comment.pr_comment import BOT_LOGIN, CommentError, publish
from gpu_runner_testing.github_double import (
    DEFAULT_REPOSITORY,
    HUMAN,
    PR_COMMENT_TOKEN,
    READ_ONLY_TOKEN,
    GitHubDouble,
)

BRANCH = "train/pr-comment"
MARKER = pr_report.MARKERS["train"]
COMMIT = "a" * 40
RUN_URL = f"https://github.com/{DEFAULT_REPOSITORY}/actions/runs/777/attempts/1"


def context(alias: str = "champion", kind: str = "train") -> pr_report.Context:
    return pr_report.Context(kind, BRANCH, COMMIT, RUN_URL, alias)


class Runs:
    """Training runs as train.py and the stop job leave them: metrics, registry tags, a version, the cost."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.client = MlflowClient(uri)
        self.experiment = self.client.create_experiment(f"pr-comment-{uuid.uuid4().hex[:8]}")
        self.model = f"pr-comment-model-{uuid.uuid4().hex[:8]}"

    def run(
        self,
        metrics: dict[str, float],
        *,
        register: bool = True,
        costs: tuple[float, ...] = (),
        name: str = "",
        tags: dict[str, str] | None = None,
    ) -> tuple[str, str | None]:
        """A finished run and the version it registered (None with register=False)."""
        run = self.client.create_run(self.experiment, run_name=name or None, tags=tags or {})
        run_id = run.info.run_id
        now = int(time.time() * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])
        version = None
        if register:
            if not self.client.search_registered_models(f"name = '{self.model}'"):
                self.client.create_registered_model(self.model)
            version = self.client.create_model_version(
                self.model, f"{run.info.artifact_uri}/model", run_id=run_id
            ).version
            for key, value in {
                "registry.model_name": self.model, "registry.version": str(version),
                "champion.metric": "test_accuracy", "champion.direction": "maximize",
                "champion.decision": "candidate",
            }.items():  # fmt: skip
                self.client.set_tag(run_id, key, value)
        for attempt, cost in enumerate(costs, start=1):  # the stop job's record, step = attempt
            self.client.log_metric(run_id, "cost_usd", cost, step=attempt)
            self.client.log_metric(run_id, "billed_seconds", 600.0, step=attempt)
        if costs:
            self.client.set_tag(run_id, "cost.instance_type", "g5.xlarge")
            self.client.set_tag(run_id, "cost.market", "spot")
        self.client.set_terminated(run_id)
        return run_id, str(version) if version is not None else None

    def crown(self, version: str) -> None:
        self.client.set_registered_model_alias(self.model, "champion", version)


@pytest.fixture
def runs(mlflow_server: str) -> Runs:
    return Runs(mlflow_server)


def body_of(runs: Runs, run_id: str, alias: str = "champion", kind: str = "train") -> str:
    return pr_report.build(MlflowRest(runs.uri), runs.uri, run_id, context(alias, kind))


# ------------------------------------------------------------------------------------------- the body
def test_the_body_shows_metrics_deltas_version_cost_and_links(runs: Runs) -> None:
    champion_id, champion_version = runs.run(
        {"test_accuracy": 0.90, "test_macro_f1": 0.88, "best_val_loss": 0.40}
    )
    assert champion_version
    runs.crown(champion_version)
    run_id, version = runs.run(
        {"test_accuracy": 0.95, "test_macro_f1": 0.93, "best_val_loss": 0.30, "best_val_accuracy": 0.97},
        costs=(0.0125, 0.0075),
        name="bold-owl-42",
    )
    # The stop job retried attempt 1's write: two points at step 1, the later one counts (record.last_per_step).
    runs.client.log_metric(run_id, "cost_usd", 0.0125, step=1)
    body = body_of(runs, run_id)

    assert body.startswith(MARKER + "\n") and body.count(MARKER) == 1
    assert f"| metric | this run | champion v{champion_version} | delta |" in body
    assert "| **test_accuracy** | 0.9500 | 0.9000 | +0.0500 |" in body, body
    assert "| test_macro_f1 | 0.9300 | 0.8800 | +0.0500 |" in body
    assert "| best_val_loss | 0.3000 | 0.4000 | -0.1000 |" in body
    assert "| best_val_accuracy | 0.9700 | - | - |" in body  # the champion's run did not log it
    experiment = runs.client.get_run(run_id).info.experiment_id
    assert f"({runs.uri}/#/experiments/{experiment}/runs/{run_id})" in body
    assert f"({runs.uri}/#/models/{runs.model}/versions/{version})" in body
    assert f"commit `{COMMIT[:12]}`" in body and f"[workflow run]({RUN_URL})" in body
    assert f"v{champion_version} of `{runs.model}`" in body
    assert f"registry decision: `candidate` (promote it: run promote.yml with run-id `{run_id}`)" in body
    # 0.0125 + 0.0075, each attempt once; 2 x 600 s billed.
    assert "**Billed GPU cost**: $0.0200 for 20 min 00 s billed (2 attempts, `g5.xlarge` `spot`)" in body, (
        body
    )
    assert champion_id not in body


def test_no_champion_yet_is_said_and_no_delta_is_made_up(runs: Runs) -> None:
    run_id, _ = runs.run({"test_accuracy": 0.8})
    body = body_of(runs, run_id)
    assert "no champion yet; the promote workflow (promote.yml) makes the first one" in body
    assert "| **test_accuracy** | 0.8000 | - | - |" in body
    assert "none logged on this run yet" in body  # no stop job has logged a cost (yet)


def test_the_run_that_holds_the_alias_says_so(runs: Runs) -> None:
    run_id, version = runs.run({"test_accuracy": 0.8})
    assert version
    runs.crown(version)
    body = body_of(runs, run_id)
    assert (
        f"this run's v{version} holds it" in body
        and "| **test_accuracy** | 0.8000 | 0.8000 | +0.0000 |" in body
    )


def test_the_run_promote_served_says_so(runs: Runs) -> None:
    """Issue 30: training registers nothing; promote serves a copy of the run's files as a version of its own run
    (in the promotions experiment), tagged with the training run, and holding the measured figures."""
    training = {
        "registry.model_name": runs.model,
        "champion.metric": "test_accuracy",
        "champion.decision": "candidate",
    }
    run_id, _ = runs.run({"test_accuracy": 0.8}, register=False, tags=training)
    _, version = runs.run({"test_accuracy": 0.82})
    assert version
    runs.client.set_model_version_tag(runs.model, version, pr_report.CANDIDATE_TAG, run_id)
    runs.crown(version)
    body = body_of(runs, run_id)
    assert f"this run's v{version} holds it; registry decision: `candidate`" in body
    assert "promote it: run promote.yml" not in body
    assert "| **test_accuracy** | 0.8000 | 0.8200 | -0.0200 |" in body  # what promote measured, not the claim


def test_a_run_without_the_registry_has_nothing_to_compare(runs: Runs) -> None:
    run_id, _ = runs.run({"test_accuracy": 0.8}, register=False)
    body = body_of(runs, run_id)
    assert "the registry is off for this run" in body and "/#/models/" not in body


def test_a_local_store_is_said_plainly() -> None:
    run_id = uuid.uuid4().hex
    body = pr_report.build_local("sqlite:///mlflow.db", run_id, context())
    assert body.startswith(MARKER)
    assert "The MLflow store is local (MLFLOW_TRACKING_URI `sqlite:///mlflow.db`)" in body
    assert f"run `{run_id}` lived on the GPU instance" in body and f"[workflow run]({RUN_URL})" in body
    assert "no MLFLOW_TRACKING_URI variable" in pr_report.build_local("", run_id, context())


def test_what_the_branch_logged_cannot_forge_the_comment(runs: Runs) -> None:
    """The training job runs the branch's code: its run name and tags are the attacker's text."""
    hostile = f"x`{MARKER}\n| forged | 1 | 1 | 1 |\n@octo-org/admins [click](https://evil.example)<img src=x>"
    run_id, _ = runs.run(
        {"test_accuracy": 0.5}, register=False, name=hostile, tags={"cost.instance_type": hostile}
    )
    body = body_of(runs, run_id)
    assert body.count(MARKER) == 1 and body.startswith(MARKER)
    assert "\n| forged" not in body
    assert "@octo-org/admins" in body  # shown, but only as text:
    outside_code = re.sub(r"`[^`\n]*`", "", body)
    for payload in ("@octo-org", "](https://evil.example)", "<img", "| forged"):
        assert payload not in outside_code, payload


def test_a_sweep_shows_its_best_trial_against_the_champion_and_the_sweep_cost(runs: Runs) -> None:
    _, champion_version = runs.run({"test_accuracy": 0.90})
    assert champion_version
    runs.crown(champion_version)
    best_id, _ = runs.run({"test_accuracy": 0.93})
    parent_id, _ = runs.run(
        {"sweep_cost_usd": 0.42, "sweep_gpu_hours": 0.5, "trials_complete": 3, "trials_pruned": 1},
        register=False,
        tags={"sweep.best_run_id": best_id, "sweep.best_trial": "2"},
    )
    body = body_of(runs, parent_id, kind="sweep")
    assert body.startswith(pr_report.MARKERS["sweep"]) and MARKER not in body
    assert "### Hyperparameter sweep on `train/pr-comment`" in body
    experiment = runs.client.get_run(best_id).info.experiment_id
    assert (
        f"best trial's MLflow run: [{best_id[:12]}]({runs.uri}/#/experiments/{experiment}/runs/{best_id})"
        in body
    )
    assert (
        "Best trial `2` of the sweep" in body and "| **test_accuracy** | 0.9300 | 0.9000 | +0.0300 |" in body
    )
    assert (
        "**Billed GPU cost (all trials so far)**: $0.4200 for 0.50 GPU hours; trials: 3 complete, 1 pruned"
        in body
    )


def test_a_sweep_without_a_finished_trial_says_so(runs: Runs) -> None:
    parent_id, _ = runs.run({"sweep_cost_usd": 0.1}, register=False)
    assert "No trial has finished yet" in body_of(runs, parent_id, kind="sweep")


def test_a_body_over_githubs_limit_is_cut_with_a_note() -> None:
    body = MARKER + "\n" + "x" * 70000
    cut = pr_report.fit(body)
    assert len(cut) == pr_report.MAX_BODY_CHARS and cut.startswith(MARKER)
    assert cut.endswith(pr_report.TRUNCATED) and "65,536" in cut
    assert pr_report.fit("short") == "short"


# ------------------------------------------------------------------------------------ the comment on GitHub
def post(double: GitHubDouble, body: str, token: str = PR_COMMENT_TOKEN, branch: str = BRANCH) -> list:
    return publish(DEFAULT_REPOSITORY, branch, body, MARKER, token, base_url=double.url, backoff_seconds=0.01)


def writes(double: GitHubDouble) -> list[tuple[str, str, int]]:
    return [(c.method, c.path, c.status) for c in double.calls if c.method in ("POST", "PATCH")]


def test_the_comment_is_created_once_then_updated_in_place(github_double: GitHubDouble) -> None:
    number = github_double.open_pull(BRANCH)
    (first,) = post(github_double, f"{MARKER}\nfirst run")
    (second,) = post(github_double, f"{MARKER}\nsecond run")
    assert (first.action, second.action) == ("created", "updated")
    assert first.comment_id == second.comment_id and first.pull_number == second.pull_number == number
    (comment,) = github_double.comments(number)
    assert (comment["id"], comment["body"], comment["login"]) == (
        first.comment_id,
        f"{MARKER}\nsecond run",
        BOT_LOGIN,
    )
    repo = f"/repos/{DEFAULT_REPOSITORY}"
    assert writes(github_double) == [
        ("POST", f"{repo}/issues/{number}/comments", 201),
        ("PATCH", f"{repo}/issues/comments/{first.comment_id}", 200),
    ]
    assert (
        second.url == f"https://github.com/{DEFAULT_REPOSITORY}/pull/{number}#issuecomment-{first.comment_id}"
    )
    assert github_double.take_violations() == []


def test_no_open_pull_request_posts_nothing_and_says_so(
    github_double: GitHubDouble, logged: Callable[[], list[str]]
) -> None:
    closed = github_double.open_pull(BRANCH)
    github_double.close_pull(closed)
    github_double.open_pull("train/another-branch")
    assert post(github_double, f"{MARKER}\nbody") == []
    assert writes(github_double) == []
    assert f"no open pull request from {BRANCH} in {DEFAULT_REPOSITORY}: no comment posted" in logged()
    (listing,) = [c for c in github_double.calls if c.path.endswith("/pulls")]
    assert listing.query == {"state": "open", "head": f"octo-org:{BRANCH}", "per_page": "100"}


def test_a_humans_comment_with_the_marker_is_never_edited(github_double: GitHubDouble) -> None:
    """Anyone may paste the marker: only the workflow bot's own comment is edited."""
    number = github_double.open_pull(BRANCH)
    human = github_double.add_comment(number, f"{MARKER}\nmy notes, not the bot's", author=HUMAN)
    other_bot = github_double.add_comment(
        number, f"{MARKER}\nanother app's bot", author=("dependabot[bot]", "Bot")
    )
    (created,) = post(github_double, f"{MARKER}\nrun 1")
    (updated,) = post(github_double, f"{MARKER}\nrun 2")
    assert created.action == "created" and updated.comment_id == created.comment_id not in (human, other_bot)
    bodies = {c["id"]: c["body"] for c in github_double.comments(number)}
    assert bodies == {
        human: f"{MARKER}\nmy notes, not the bot's",
        other_bot: f"{MARKER}\nanother app's bot",
        created.comment_id: f"{MARKER}\nrun 2",
    }


def test_a_forks_pull_request_of_a_branch_with_the_same_name_is_skipped(github_double: GitHubDouble) -> None:
    # GitHub's head filter is owner:branch, so a fork under the same owner matches it; another owner's does not.
    same_owner_fork = github_double.open_pull(BRANCH, head_repository="octo-org/octo-repo-fork")
    other_fork = github_double.open_pull(BRANCH, head_repository="mallory/octo-repo")
    assert post(github_double, f"{MARKER}\nbody") == []
    assert github_double.comments(same_owner_fork) == github_double.comments(other_fork) == []
    assert writes(github_double) == []


def test_its_comment_is_found_past_the_first_page(github_double: GitHubDouble) -> None:
    """Comments come oldest first, 100 a page at most: after 120 review remarks, its own is on page 2."""
    number = github_double.open_pull(BRANCH)
    for index in range(120):
        github_double.add_comment(number, f"review remark {index}")
    (created,) = post(github_double, f"{MARKER}\nrun 1")
    github_double.clear_calls()
    (updated,) = post(github_double, f"{MARKER}\nrun 2")
    assert (created.action, updated.action, updated.comment_id) == ("created", "updated", created.comment_id)
    pages = [
        c for c in github_double.calls if c.method == "GET" and c.path.endswith(f"/issues/{number}/comments")
    ]
    assert [c.query.get("page", "1") for c in pages] == ["1", "2"]
    assert [c["body"] for c in github_double.comments(number) if c["login"] == BOT_LOGIN] == [
        f"{MARKER}\nrun 2"
    ]


def test_a_token_without_pull_requests_write_fails_with_the_fix_named(github_double: GitHubDouble) -> None:
    github_double.open_pull(BRANCH)
    with pytest.raises(CommentError, match=r"GitHub answered 403 .*permissions: pull-requests: write"):
        post(github_double, f"{MARKER}\nbody", token=READ_ONLY_TOKEN)
    # Allowed to read pull requests, not to write: the refusal comes at the write, named the same way.
    github_double.tokens["ghs_reads_pulls_0123456789abcdef"] = {"pull_requests": "read", "metadata": "read"}
    with pytest.raises(
        CommentError, match=r"commenting on pull request #1: GitHub answered 403 .*pull-requests: write"
    ):
        post(github_double, f"{MARKER}\nbody", token="ghs_reads_pulls_0123456789abcdef")
    with pytest.raises(CommentError, match=r"GitHub answered 401 .*not valid"):
        post(github_double, f"{MARKER}\nbody", token="ghs_not_a_token_0123456789")
    assert [w[2] for w in writes(github_double)] == [403]  # refused, nothing written
    assert github_double.comments(1) == []


def test_githubs_body_limit_is_held_by_the_double(github_double: GitHubDouble) -> None:
    github_double.open_pull(BRANCH)
    with pytest.raises(CommentError, match=r"GitHub answered 422 .*refused the comment body"):
        post(github_double, MARKER + "x" * 65536)
    (posted,) = post(github_double, pr_report.fit(MARKER + "x" * 65536))
    assert posted.action == "created"


# ------------------------------------------------------------------------------------ the command
@pytest.fixture
def command_env(
    github_double: GitHubDouble, runs: Runs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "train.yaml").write_text("registry:\n  alias: champion\n")
    summary = tmp_path / "summary.md"
    for key, value in {
        "GITHUB_REPOSITORY": DEFAULT_REPOSITORY, "GITHUB_API_URL": github_double.url,
        "GITHUB_TOKEN": PR_COMMENT_TOKEN, "GITHUB_RUN_ID": "777", "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_SERVER_URL": "https://github.com", "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_ACTIONS": "true", "MLFLOW_TRACKING_URI": runs.uri,
    }.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    return summary


def cli(run_id: str, *extra: str) -> int:
    return main(["pr-comment", "--kind=train", f"--mlflow-run-id={run_id}", f"--branch={BRANCH}", *extra])


def test_the_command_comments_from_the_run_and_reports_it(
    github_double: GitHubDouble, runs: Runs, command_env: Path
) -> None:
    number = github_double.open_pull(BRANCH)
    run_id, _ = runs.run({"test_accuracy": 0.91}, costs=(0.01,))
    assert cli(run_id, f"--commit={COMMIT}") == 0
    assert cli(run_id, f"--commit={COMMIT}") == 0
    (comment,) = github_double.comments(number)
    assert comment["body"].startswith(MARKER) and "| **test_accuracy** | 0.9100 |" in comment["body"]
    assert RUN_URL in comment["body"]
    lines = command_env.read_text().splitlines()
    assert lines == [
        f"Pull-request comment created on #{number}: https://github.com/{DEFAULT_REPOSITORY}/pull/{number}#issuecomment-{comment['id']}",
        f"Pull-request comment updated on #{number}: https://github.com/{DEFAULT_REPOSITORY}/pull/{number}#issuecomment-{comment['id']}",
    ]


def test_a_refused_comment_is_an_annotation_not_a_crash(
    github_double: GitHubDouble, runs: Runs, command_env: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    github_double.open_pull(BRANCH)
    run_id, _ = runs.run({"test_accuracy": 0.91})
    monkeypatch.setenv("GITHUB_TOKEN", READ_ONLY_TOKEN)
    assert cli(run_id) == 1
    out = capsys.readouterr()
    assert (
        "::error title=Pull-request comment::listing the open pull requests from train/pr-comment: GitHub answered 403"
        in out.out
    )
    assert "pull-requests: write" in out.err
    assert command_env.read_text().startswith(
        "**Pull-request comment not posted**: listing the open pull requests from train/pr-comment: GitHub answered 403"
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--mlflow-run-id=--x"], "--mlflow-run-id"),
        (["--commit=main"], "--commit"),
        (["--kind=deploy"], "--kind"),
        (["--config=missing.yaml"], "--config missing.yaml"),
    ],
)
def test_bad_input_names_the_field(
    command_env: Path,
    github_double: GitHubDouble,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    field: str,
) -> None:
    good = ["--kind=train", f"--mlflow-run-id={uuid.uuid4().hex}", f"--branch={BRANCH}"]
    flags = {a.split("=")[0]: a for a in good}
    flags.update({a.split("=")[0]: a for a in args})
    assert main(["pr-comment", *flags.values()]) == 1
    assert field in capsys.readouterr().err
    assert github_double.calls == []


def test_an_unknown_run_or_an_unreachable_server_is_a_clear_error_and_posts_nothing(
    github_double: GitHubDouble, command_env: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    github_double.open_pull(BRANCH)
    missing = uuid.uuid4().hex
    assert cli(missing) == 1
    assert re.search(
        rf"MLflow at http://127\.0\.0\.1:\d+: GET runs/get answered HTTP 404 .*{missing}",
        capsys.readouterr().err,
    )
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed}")
    assert cli(missing) == 1
    assert (
        f"MLflow at http://127.0.0.1:{closed}: http://127.0.0.1:{closed} unreachable"
        in capsys.readouterr().err
    )
    assert writes(github_double) == [] and github_double.comments(1) == []
