"""`gpu-runner platform-update` against a real git repository of the platform and a real `uv lock`.

The repository stands in for github.com/<owner>/<template>: git's insteadOf (in the environment, as for the
template's bakes) sends the pinned URL to a local directory, which serves commits by SHA as GitHub does.
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_runner.core.errors import RunnerError
from gpu_runner.pin import project_pin, update
from gpu_runner.pin.project_pin import Pin

REPOSITORY = "your-org/mlops-template"
STACK = "platform/src/gpu_runner/setup/gpu-runner.yaml"
MODULE = "platform/src/gpu_runner/core/naming.py"
GIT_ID = ("-c", "user.name=pin-test", "-c", "user.email=pin-test@example.invalid")
CHANGELOG_AT = {
    "0.2.0": "# Changelog\n\n## 0.2.0 (2026-12-06)\n\n### Changed\n- first\n\n### What a team must do\n- Nothing.\n",
    "0.3.0": "# Changelog\n\n## 0.3.0 (2027-01-10)\n\n### Changed\n- the stack gained a role\n\n"
    "### What a team must do\n- make bootstrap\n\n## 0.2.0 (2026-12-06)\n\n### Changed\n- first\n\n"
    "### What a team must do\n- Nothing.\n",
}
PROJECT_PYPROJECT = """[project]
name = "team-project"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = []

[dependency-groups]
# The light group the launch jobs install.
runner = ["gpu-runner"]

[tool.uv.sources]
# The GPU runner platform, pinned by commit.
gpu-runner = {{ git = "https://github.com/{repository}", rev = "{commit}", subdirectory = "platform" }}
"""
WORKFLOW = """on: push
jobs:
  start:
    uses: {repository}/.github/workflows/gpu-runner-start.yml@{commit}
  other:
    uses: {repository}-fork/.github/workflows/gpu-runner-start.yml@{commit}
"""
README = """# A project

[setup](https://github.com/{repository}/blob/{commit}/platform/manual/setup.md#preflight-make-doctor),
[a fork's](https://github.com/{repository}-fork/blob/{commit}/platform/manual/setup.md)
"""


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *GIT_ID, *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"git {args}: {proc.stderr}"
    return proc.stdout.strip()


def uv() -> str:
    found = shutil.which("uv")
    if found:
        return found
    if importlib.util.find_spec("uv") is not None:
        return f"{sys.executable} -m uv"
    pytest.skip("uv is not installed: `make install` puts it in the template's venv")


def platform_commit(repo: Path, version: str, stack: str, module: str = "") -> str:
    """A commit of the platform: pyproject with `version` (static metadata, no dependencies: uv locks it without
    building), its changelog at that version, the setup stack and one module."""
    (repo / "platform" / "src" / "gpu_runner" / "setup").mkdir(parents=True, exist_ok=True)
    (repo / "platform" / "src" / "gpu_runner" / "core").mkdir(parents=True, exist_ok=True)
    (repo / "platform" / "pyproject.toml").write_text(
        f'[project]\nname = "gpu-runner"\nversion = "{version}"\nrequires-python = ">=3.11"\ndependencies = []\n\n'
        '[build-system]\nrequires = ["hatchling>=1.25"]\nbuild-backend = "hatchling.build"\n',
        encoding="utf-8",
    )
    (repo / "platform" / "CHANGELOG.md").write_text(CHANGELOG_AT[version], encoding="utf-8")
    (repo / STACK).write_text(stack, encoding="utf-8")
    (repo / MODULE).write_text(module, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"platform {version}")
    return git(repo, "rev-parse", "HEAD")


def serve(monkeypatch: pytest.MonkeyPatch, repo: Path) -> None:
    """Fetches of https://github.com/REPOSITORY read `repo`, which serves commits by SHA as GitHub does."""
    for name, value in {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": f"url.file://{repo}.insteadOf",
        "GIT_CONFIG_VALUE_0": f"https://github.com/{REPOSITORY}",
        "GIT_CONFIG_KEY_1": "uploadpack.allowReachableSHA1InWant",
        "GIT_CONFIG_VALUE_1": "true",
    }.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def platform_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Three commits: 0.2.0 (pinned), 0.3.0 with a changed stack (tagged platform-v0.3.0), then an unreleased
    module change on main."""
    repo = tmp_path / "template"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commits = {
        "old": platform_commit(repo, "0.2.0", "Resources: {}\n"),
        "release": platform_commit(repo, "0.3.0", "Resources: {Role: {}}\n"),
    }
    git(repo, "tag", "-a", "platform-v0.3.0", "-m", "0.3.0")
    commits["main"] = platform_commit(repo, "0.3.0", "Resources: {Role: {}}\n", module="NAME = 1\n")
    serve(monkeypatch, repo)
    return commits


def pinned_project(root: Path, commit: str) -> Path:
    project = root / "project"
    (project / ".github" / "workflows").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        PROJECT_PYPROJECT.format(repository=REPOSITORY, commit=commit), encoding="utf-8"
    )
    (project / ".github" / "workflows" / "train.yml").write_text(
        WORKFLOW.format(repository=REPOSITORY, commit=commit), encoding="utf-8"
    )
    (project / "docs").mkdir()
    (project / "docs" / "page.md").write_text(
        README.format(repository=REPOSITORY, commit=commit), encoding="utf-8"
    )
    lock = subprocess.run(
        [*shlex.split(uv()), "lock"], cwd=project, capture_output=True, text=True, check=False
    )
    assert lock.returncode == 0, lock.stderr
    return project


def locked_commit(project: Path) -> str:
    text = (project / "uv.lock").read_text(encoding="utf-8")
    source = next(line for line in text.splitlines() if line.startswith("source = { git = "))
    return source.split("#")[-1].rstrip('" }')


def test_the_default_is_the_newest_release_and_everything_moves_together(
    platform_repo: dict[str, str], tmp_path: Path
) -> None:
    project = pinned_project(tmp_path, platform_repo["old"])

    out = update.platform_update(project, "", uv(), check=False, allow_downgrade=False)

    release = platform_repo["release"]
    assert project_pin.read_pin(project) == Pin(REPOSITORY, release, "platform")
    assert locked_commit(project) == release
    workflow = (project / ".github" / "workflows" / "train.yml").read_text(encoding="utf-8")
    assert f"{REPOSITORY}/.github/workflows/gpu-runner-start.yml@{release}" in workflow
    # Another repository at the same commit string is not this platform: left alone.
    assert f"{REPOSITORY}-fork/.github/workflows/gpu-runner-start.yml@{platform_repo['old']}" in workflow
    assert f"to platform-v0.3.0 ({release[:12]}, version 0.3.0)" in out
    # The links to the manual name the commit the workflows and the lock name; a fork's is left alone.
    page = (project / "docs" / "page.md").read_text(encoding="utf-8")
    assert f"github.com/{REPOSITORY}/blob/{release}/platform/manual/setup.md#preflight" in page
    assert f"github.com/{REPOSITORY}-fork/blob/{platform_repo['old']}/platform/manual" in page
    assert "  pyproject.toml, uv.lock, .github/workflows/train.yml, docs/page.md\n" in out
    assert "## 0.3.0 (2027-01-10)\n### Changed\n- the stack gained a role" in out
    assert "## 0.2.0" not in out  # already taken
    assert "Then run, in this order:\n  make bootstrap" in out
    assert "# The GPU runner platform, pinned by commit." in (project / "pyproject.toml").read_text()  # kept
    lock_check = subprocess.run(
        [*shlex.split(uv()), "lock", "--check"], cwd=project, capture_output=True, text=True
    )
    assert lock_check.returncode == 0, lock_check.stderr


def test_each_stack_it_names_is_in_the_platform_and_each_step_is_a_target_of_the_project() -> None:
    platform = Path(__file__).resolve().parents[1]
    assert [path for path in update.STACKS if not (platform / path).is_file()] == []
    makefile = (platform.parent / "{{cookiecutter.project_slug}}" / "Makefile").read_text(encoding="utf-8")
    targets = {line.split(":")[0] for line in makefile.splitlines() if line[:1].isalpha() and ":" in line}
    steps = [*update.STACKS.values(), update.TRUST, update.BATCH_TRUST]
    assert [step for step in steps if step.split()[1] not in targets] == []


def test_a_branch_with_only_a_module_change_asks_for_bootstrap_for_the_trust(
    platform_repo: dict[str, str], tmp_path: Path
) -> None:
    project = pinned_project(tmp_path, platform_repo["release"])

    out = update.platform_update(project, "main", uv(), check=False, allow_downgrade=False)

    assert project_pin.read_pin(project).commit == platform_repo["main"]
    # No stack changed, but the roles trust the old commit: bootstrap, then the Batch stack, nothing else.
    assert f"Then run, in this order:\n  {update.TRUST}\n  {update.BATCH_TRUST}\n" in out
    assert "(no changelog entry between the two commits)" in out
    again = update.platform_update(project, "main", uv(), check=False, allow_downgrade=False)
    assert again.startswith("The platform is already at main")


def test_the_changelog_reaches_the_terminal_without_control_characters() -> None:
    # The changelog comes from whichever repository the pin names: an escape sequence in it is dropped.
    assert update.inert("- fixed\x1b]8;;https://evil.example\x07 a link\x1b[2J\n\tnext") == (
        "- fixed]8;;https://evil.example a link[2J\n\tnext"
    )


def test_check_changes_nothing(platform_repo: dict[str, str], tmp_path: Path) -> None:
    project = pinned_project(tmp_path, platform_repo["old"])
    before = {path: path.read_bytes() for path in project.rglob("*") if path.is_file()}

    out = update.platform_update(project, platform_repo["main"], uv(), check=True, allow_downgrade=False)

    assert out.startswith("Would move the platform")
    assert "It would then need:\n  make bootstrap" in out
    assert {path: path.read_bytes() for path in project.rglob("*") if path.is_file()} == before


def test_an_older_version_is_refused_unless_asked_for(platform_repo: dict[str, str], tmp_path: Path) -> None:
    project = pinned_project(tmp_path, platform_repo["release"])

    with pytest.raises(
        RunnerError, match=r"version 0\.2\.0 is older than the pinned 0\.3\.0; .*--allow-downgrade"
    ):
        update.platform_update(project, platform_repo["old"], uv(), check=False, allow_downgrade=False)
    assert project_pin.read_pin(project).commit == platform_repo["release"]

    update.platform_update(project, platform_repo["old"], uv(), check=False, allow_downgrade=True)
    assert project_pin.read_pin(project).commit == platform_repo["old"]


def test_a_failed_lock_puts_every_file_back(platform_repo: dict[str, str], tmp_path: Path) -> None:
    project = pinned_project(tmp_path, platform_repo["old"])
    before = {path: path.read_bytes() for path in project.rglob("*") if path.is_file()}

    with pytest.raises(RunnerError, match="uv lock failed, nothing changed"):
        update.platform_update(project, "main", "false", check=False, allow_downgrade=False)

    assert {path: path.read_bytes() for path in project.rglob("*") if path.is_file()} == before


@pytest.mark.parametrize(
    ("to", "message"),
    [
        ("no-such-branch", "has no tag or branch 'no-such-branch'"),
        ("0" * 40, "git fetch"),  # a commit the repository does not have
    ],
)
def test_an_unknown_target_is_named(
    platform_repo: dict[str, str], tmp_path: Path, to: str, message: str
) -> None:
    project = pinned_project(tmp_path, platform_repo["old"])
    with pytest.raises(RunnerError, match=message):
        update.platform_update(project, to, uv(), check=False, allow_downgrade=False)


def test_no_release_yet_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "template"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit = platform_commit(repo, "0.2.0", "Resources: {}\n")
    serve(monkeypatch, repo)
    project = pinned_project(tmp_path, commit)
    with pytest.raises(RunnerError, match=r"no release tag \(platform-v<version>\) yet: .*TO=main"):
        update.platform_update(project, "", uv(), check=False, allow_downgrade=False)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("", "no git pin of the platform .*make template-update"),
        ('gpu-runner = { path = "runner", editable = true }', "no git pin of the platform"),
        ('gpu-runner = { git = "https://gitlab.com/o/r", rev = "' + "a" * 40 + '", subdirectory = "platform" }',
         "is not https://github.com/<owner>/<repository>"),
        ('gpu-runner = { git = "https://github.com/o/r", rev = "main", subdirectory = "platform" }',
         "rev = 'main' is not a full commit SHA"),
        ('gpu-runner = { git = "https://github.com/o/r", rev = "' + "a" * 40 + '" }', "no subdirectory"),
    ],
)  # fmt: skip
def test_a_pyproject_without_a_commit_pin_is_refused_naming_the_fix(
    tmp_path: Path, source: str, message: str
) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'p'\n\n[tool.uv.sources]\n{source}\n")
    with pytest.raises(RunnerError, match=message):
        project_pin.read_pin(tmp_path)


def test_a_pin_written_twice_is_refused_and_the_file_kept(tmp_path: Path) -> None:
    commit = "a" * 40
    text = PROJECT_PYPROJECT.format(repository=REPOSITORY, commit=commit) + f'# old: rev = "{commit}"\n'
    (tmp_path / "pyproject.toml").write_text(text, encoding="utf-8")
    with pytest.raises(RunnerError, match=r"exactly once .* found it 2 times; set the rev by hand"):
        project_pin.write_pin(tmp_path, project_pin.read_pin(tmp_path), "b" * 40)
    assert (tmp_path / "pyproject.toml").read_text(encoding="utf-8") == text


# ------------------------------------------------------------------------------- the pinned platform's tree
def test_the_tree_is_the_pinned_commits_files_fetched_once(
    platform_repo: dict[str, str], tmp_path: Path
) -> None:
    """gpu_runner_testing.platform_tree: what a project's tests read the platform's actions from, and what its act
    stories serve as `<owner>/<template>@<commit>`. The commit's files, not the newest ones; kept by commit."""
    from gpu_runner_testing.platform_tree import tree_at

    cache = tmp_path / "cache"
    old = tree_at(Pin(REPOSITORY, platform_repo["old"], "platform"), cache)
    assert old == cache / "platform" / platform_repo["old"]
    assert 'version = "0.2.0"' in (old / "platform" / "pyproject.toml").read_text(encoding="utf-8")
    assert not (old / ".git").exists()
    main = tree_at(Pin(REPOSITORY, platform_repo["main"], "platform"), cache)
    assert 'version = "0.3.0"' in (main / "platform" / "pyproject.toml").read_text(encoding="utf-8")
    # Kept: a second call fetches nothing (the served repository is gone, and the tree is still found).
    (tmp_path / "template").rename(tmp_path / "gone")
    assert tree_at(Pin(REPOSITORY, platform_repo["old"], "platform"), cache) == old
    with pytest.raises(RunnerError, match="git fetch"):
        tree_at(Pin(REPOSITORY, "f" * 40, "platform"), cache)
    assert not (cache / "platform" / ("f" * 40)).exists()  # a failed fetch leaves no tree to be found later
