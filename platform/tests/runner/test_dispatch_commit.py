"""A hand-made dispatch of train.yml with `commit=<another branch's commit>` (an unreviewed branch, a fork pull
request's head) must not make the GPU instance train that code with the dispatched branch's roles (issue 13,
item 11): `gpu-runner launch` asks GitHub's compare whether the commit is in the dispatched branch's history,
before the JIT config and RunInstances."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_runner.cli import main
from gpu_runner.core.aws import Aws
from gpu_runner_testing.aws_constants import REGION
from gpu_runner_testing.github_double import DEFAULT_REPOSITORY, START_JOB_TOKEN, WORKFLOW_TOKEN, GitHubDouble
from gpu_runner_testing.live_instances import live

BRANCH = "train/x"


@pytest.fixture
def history(github_double: GitHubDouble) -> dict[str, str]:
    """main: m1; train/x: m1 <- x1 <- x2 (the head); an unreviewed branch: m1 <- evil. Names -> SHAs."""
    m1 = github_double.commit("main", files=("src/model.py",))
    x1 = github_double.commit(BRANCH, parents=[m1], files=("configs/train.yaml",))
    x2 = github_double.commit(BRANCH, files=("src/data.py",))
    evil = github_double.commit("unreviewed", parents=[m1], files=("src/model.py",))
    return {"m1": m1, "x1": x1, "x2": x2, "evil": evil}


@pytest.fixture
def dispatch_env(cli_env: Path, history: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Path:
    """What a workflow_dispatch on train/x gives the start job's launch step (GITHUB_SHA: the branch head)."""
    monkeypatch.setenv("GITHUB_EVENT_NAME", "workflow_dispatch")
    monkeypatch.setenv("GITHUB_REF_NAME", BRANCH)
    monkeypatch.setenv("GITHUB_SHA", history["x2"])
    monkeypatch.setenv("GITHUB_TOKEN", START_JOB_TOKEN)
    return cli_env


def live_instances(aws: Aws) -> list[str]:
    return [i["InstanceId"] for i in live(aws.client("ec2", REGION), managed_only=True)]


def compare_calls(double: GitHubDouble) -> list[tuple[str, int, str]]:
    return [(r.path, r.status, r.credential) for r in double.requests if "/compare/" in r.path]


def launch(settings: Path, commit: str) -> int:
    return main(["--settings", str(settings), "launch", "--spot=false", f"--commit={commit}", "--attempt=1"])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("evil", "is not in the history of branch 'train/x' (GitHub compares it to the branch head"),
        ("unknown", "is not a commit of octo-org/octo-repo that shares history with branch 'train/x'"),
    ],
)
def test_a_commit_off_the_branch_is_refused_before_any_paid_call(
    dispatch_env: Path, history: dict[str, str], github_double: GitHubDouble, aws: Aws, capsys, name: str,
    expected: str,
) -> None:  # fmt: skip
    commit = history.get(name, "0123456789abcdef0123456789abcdef01234567")

    assert launch(dispatch_env, commit) == 1

    err = capsys.readouterr().err
    assert f"dispatch input `commit`: {commit} {expected}" in err, err
    assert "leave `commit` empty to train the branch head" in err  # the fix
    assert live_instances(aws) == []  # no RunInstances
    assert github_double.issued_jit_configs == {} and github_double.runners == {}  # no JIT config
    # One call, and it is the compare (base: the input, head: this run's GITHUB_SHA) with the start job's token.
    status = 200 if name == "evil" else 404
    assert [(r.method, r.path, r.status, r.credential) for r in github_double.requests] == [
        ("GET", f"/repos/{DEFAULT_REPOSITORY}/compare/{commit}...{history['x2']}", status, START_JOB_TOKEN)
    ]
    assert github_double.requests[0].query == {"page": "1", "per_page": "1"}


@pytest.mark.parametrize(("name", "status"), [("x1", "ahead"), ("x2", "identical"), ("m1", "ahead")])
def test_a_commit_of_the_branch_launches(
    dispatch_env: Path, history: dict[str, str], github_double: GitHubDouble, aws: Aws, name: str, status: str
) -> None:
    """x1 is behind the head (compare from it to the head: "ahead"), x2 the head itself ("identical"), m1 the
    commit the branch was cut from (on the branch too)."""
    assert launch(dispatch_env, history[name]) == 0

    assert compare_calls(github_double) == [
        (f"/repos/{DEFAULT_REPOSITORY}/compare/{history[name]}...{history['x2']}", 200, START_JOB_TOKEN)
    ]
    assert len(live_instances(aws)) == 1 and len(github_double.issued_jit_configs) == 1


def test_a_push_leaves_commit_empty_and_makes_no_compare_call(
    cli_env: Path, github_double: GitHubDouble, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The push event trains its own GITHUB_SHA: nothing to check, and no GITHUB_TOKEN needed."""
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)

    assert main(["--settings", str(cli_env), "launch", "--spot=false", "--commit=", "--attempt=1"]) == 0

    assert compare_calls(github_double) == []
    assert len(live_instances(aws)) == 1


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (None, "GITHUB_TOKEN is not set: the launch step passes the workflow's token (permissions: contents: read)"),
        (WORKFLOW_TOKEN, "GitHub answered 403 Resource not accessible by integration (the start job needs "
                         "`permissions: contents: read`"),
    ],
)  # fmt: skip
def test_without_a_token_that_reads_contents_launch_stops_and_says_why(
    dispatch_env: Path, history: dict[str, str], github_double: GitHubDouble, aws: Aws,
    monkeypatch: pytest.MonkeyPatch, capsys, token: str | None, expected: str,
) -> None:  # fmt: skip
    """Fail closed: a check that cannot be made refuses the launch (WORKFLOW_TOKEN holds actions: write only)."""
    if token is None:
        monkeypatch.delenv("GITHUB_TOKEN")
    else:
        monkeypatch.setenv("GITHUB_TOKEN", token)

    assert launch(dispatch_env, history["x1"]) == 1

    assert expected in capsys.readouterr().err
    assert live_instances(aws) == [] and github_double.issued_jit_configs == {}


@pytest.mark.parametrize(("name", "expected"), [("evil", "is not in the history of branch 'train/x'"),
                                                ("unknown", "is not a commit of octo-org/octo-repo")])  # fmt: skip
def test_the_batch_backend_ships_no_commit_off_the_branch(
    dispatch_env: Path, history: dict[str, str], github_double: GitHubDouble, aws: Aws, tmp_path: Path, capsys,
    name: str, expected: str,
) -> None:  # fmt: skip
    """`backend: batch` has no launch: `batch ship` (batch.yml's first step with AWS credentials) asks the same
    question before it packs, so the job never receives another branch's code."""
    commit = history.get(name, "0123456789abcdef0123456789abcdef01234567")
    s3 = aws.client("s3", REGION)
    bucket = f"ship-{name}-{tmp_path.name[-8:].lower().replace('_', '-')}"
    s3.create_bucket(Bucket=bucket)

    code = main(["--settings", str(dispatch_env), "batch", "ship", f"--bucket={bucket}", f"--commit={commit}",
                 f"--repo-dir={tmp_path}"])  # fmt: skip

    assert code == 1
    assert f"dispatch input `commit`: {commit} {expected}" in capsys.readouterr().err
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0  # nothing shipped
    assert compare_calls(github_double) == [
        (f"/repos/{DEFAULT_REPOSITORY}/compare/{commit}...{history['x2']}", 200 if name == "evil" else 404,
         START_JOB_TOKEN)
    ]  # fmt: skip
