"""Template updates reach projects: a bake records its template and commit (.cruft.json), and the project's
own `make template-update` takes it from an older template commit to the current one, reporting conflicts.

Where the older commit comes from: each test builds a throwaway git repository of the template in tmp whose
second commit is the template as it is now and whose first is a scripted older state: the current files with
the changes of OLDER reverted. Not the repository's own history: CI's clone may be shallow (`HEAD~1` absent),
real older commits predate `make template-update` (an older bake must carry the target that takes the
update), and a real diff would test something else at every commit. Each change in OLDER is a kind an update
must carry: a changed line of a rendered file (the Makefile), a dependency pin with its uv.lock entry (the
lock changes between template versions), a page the new version adds and one it deletes. Every replacement
must match once, so drift in the template fails here loudly, and
test_the_older_bake_differs_in_exactly_the_scripted_files proves the two bakes differ, so the update test
cannot pass vacuously.

Everything is local: the template is a path, cruft clones it from disk, the bakes' uv finds its packages in
the cache (or the package index, as `make install` does).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TEMPLATE_ROOT, write_config
from cookiecutter.main import cookiecutter
from gpu_runner.pin.project_pin import Pin, pinned_files
from template_snapshot import PLATFORM_REPOSITORY, snapshot_git_env

# Installs the updated bake's locked environment, runs its ruff and some of its tests: about a minute, like
# the other baked-project tests (root `make test` runs the `generated` tier).
pytestmark = pytest.mark.generated

SLUG = "{{cookiecutter.project_slug}}"
# What cruft needs of the template: its questions, its hooks, the project directory, and the platform a bake
# pins at the template's commit (issue 31).
TEMPLATE_PARTS = ("cookiecutter.json", "hooks", SLUG, "platform")
COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache", ".venv")
GIT_ID = ("-c", "user.name=template-test", "-c", "user.email=template-test@example.invalid")

# The Makefile line both the template (1 -> 2) and, in the conflict tests, the user change.
OLD_WORKERS = "TEST_WORKERS ?= 1\n"
NEW_WORKERS = "TEST_WORKERS ?= 2\n"
USER_WORKERS = "TEST_WORKERS ?= 4  # this team's CI machines have 4 cores\n"
OLD_ONLY_PAGE = "docs/release-notes.md"
NEW_ONLY_PAGE = "docs/workflow-permissions.md"
# The platform (platform/, which a bake pins by commit) is older too: a lower version in its pyproject and
# in the bake's uv.lock, its changelog without the newest release, and its setup stack with one more comment
# line, so `make platform-update` has a release to report and a stack to deploy again.
PLATFORM_VERSION = tomllib.loads((TEMPLATE_ROOT / "platform" / "pyproject.toml").read_text(encoding="utf-8"))[
    "project"
]["version"]
OLDER_PLATFORM_VERSION = "0.0.0"
# path in the project -> (text now, text in the older commit); each `now` occurs exactly once in its file.
OLDER: dict[str, list[tuple[str, str]]] = {
    "Makefile": [(NEW_WORKERS, OLD_WORKERS)],
    "pyproject.toml": [('  "ruff>=0.8",\n', '  "ruff>=0.7",\n')],
    "uv.lock": [
        ('{ name = "ruff", specifier = ">=0.8" }', '{ name = "ruff", specifier = ">=0.7" }'),
        (
            f'name = "gpu-runner"\nversion = "{PLATFORM_VERSION}"',
            f'name = "gpu-runner"\nversion = "{OLDER_PLATFORM_VERSION}"',
        ),
    ],
}
STACK = "src/gpu_runner/setup/gpu-runner.yaml"
CHANGED = {*OLDER, OLD_ONLY_PAGE, NEW_ONLY_PAGE, ".cruft.json"}
# A few fast tests of the updated project that exercise what the update touched: the docs (the new page linked
# and reachable, layout rows against files on disk), the Makefile's targets as CI calls them, and the update
# script's own checks.
PROJECT_TESTS = ("tests/test_docs.py", "tests/workflows/test_ci_files.py", "tests/test_template_update.py")
# Never part of a project's tree: git's own directory and what running uv and the tests leave behind.
NOT_TREE = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache"}


@dataclass(frozen=True)
class TemplateRepo:
    path: Path
    older: str
    current: str


def run(command: list[str], cwd: Path, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    # A bake is its own world: no outer venv or make, and cookiecutter's user config kept in tmp.
    inherited = ("VIRTUAL_ENV", "UV_PROJECT", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "GIT_")
    clean = {key: value for key, value in os.environ.items() if not key.startswith(inherited)}
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, env={**clean, **env}, timeout=timeout, check=False
    )


def platform_from(template: TemplateRepo) -> dict[str, str]:
    """git's insteadOf for the bakes' uv and `make platform-update`: the pinned platform comes from this
    throwaway template repository, whose commits the bakes pin, served by SHA as GitHub serves them."""
    return snapshot_git_env(template.path)


def git(cwd: Path, *args: str) -> str:
    proc = run(["git", *GIT_ID, *args], cwd)
    assert proc.returncode == 0, f"git {args}: {proc.stderr}"
    return proc.stdout.strip()


def copy_template(destination: Path) -> None:
    for part in TEMPLATE_PARTS:
        source = TEMPLATE_ROOT / part
        if source.is_dir():
            shutil.copytree(source, destination / part, ignore=COPY_IGNORE)
        else:
            shutil.copy2(source, destination / part)


def make_older(template: Path) -> None:
    """Turn a copy of the current template into the scripted older state (OLDER, the two pages)."""
    project = template / SLUG
    for relative, replacements in OLDER.items():
        path = project / relative
        text = path.read_text(encoding="utf-8")
        for now, before in replacements:
            assert text.count(now) == 1, f"{relative}: {now!r} occurs {text.count(now)} times; update OLDER"
            text = text.replace(now, before)
        path.write_text(text, encoding="utf-8")
    (project / NEW_ONLY_PAGE).unlink()
    (project / OLD_ONLY_PAGE).write_text("# Release notes\n\nThe older template's page.\n", encoding="utf-8")
    make_platform_older(template / "platform")


def newest_release(changelog: str) -> str:
    """The changelog's first `## ` section, from its heading to the next heading or the end."""
    first = changelog.index("\n## ")
    after = changelog.find("\n## ", first + 1)
    return changelog[first : after if after > 0 else len(changelog)]


def make_platform_older(platform: Path) -> None:
    pyproject = platform / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    assert text.count(f'version = "{PLATFORM_VERSION}"') == 1
    pyproject.write_text(
        text.replace(f'version = "{PLATFORM_VERSION}"', f'version = "{OLDER_PLATFORM_VERSION}"')
    )
    changelog = platform / "CHANGELOG.md"
    text = changelog.read_text(encoding="utf-8")
    changelog.write_text(text.replace(newest_release(text), ""), encoding="utf-8")
    stack = platform / STACK
    stack.write_text("# the older platform's stack\n" + stack.read_text(encoding="utf-8"), encoding="utf-8")


def build_template_repo(root: Path) -> TemplateRepo:
    """A git repository: its first commit is the older template, its second (HEAD) the current one."""
    repo = root / "template"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    copy_template(repo)
    make_older(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the older template")
    older = git(repo, "rev-parse", "HEAD")
    for part in TEMPLATE_PARTS:
        path = repo / part
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    copy_template(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the current template")
    return TemplateRepo(repo, older, git(repo, "rev-parse", "HEAD"))


def bake(template: TemplateRepo, commit: str, output: Path, config: Path) -> Path:
    """Bake `commit` of the template as a user does (plain cookiecutter on the checkout); commit the bake."""
    git(template.path, "checkout", "-q", commit)
    try:
        project = Path(
            cookiecutter(str(template.path), no_input=True, output_dir=str(output), config_file=str(config))
        )
    finally:
        git(template.path, "checkout", "-q", "main")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "baked from the template")
    return project


def tree(root: Path) -> dict[str, bytes]:
    """Every file of a project, relative path -> bytes (with the executable bit in the key)."""
    files = {}
    for directory, dirs, names in os.walk(root):
        dirs[:] = [name for name in dirs if name not in NOT_TREE]
        for name in names:
            path = Path(directory) / name
            mode = "x" if os.access(path, os.X_OK) else "-"
            files[f"{path.relative_to(root)} {mode}"] = path.read_bytes()
    return files


def platform_callers(project: Path, commit: str) -> set[str]:
    """The project's files that name the platform at `commit` (the calls of its workflows and actions, the
    links to its manual, pinned by the hook with the lock): they differ between bakes of two commits by that
    pin alone. The same files `make platform-update` moves."""
    pin = Pin(PLATFORM_REPOSITORY, commit, "platform")
    return {path.relative_to(project).as_posix() for path in pinned_files(project, pin)}


def differing(first: dict[str, bytes], second: dict[str, bytes]) -> set[str]:
    return {key.rsplit(" ", 1)[0] for key in first.keys() ^ second.keys()} | {
        key.rsplit(" ", 1)[0] for key in first.keys() & second.keys() if first[key] != second[key]
    }


def cookiecutter_cli(config: Path, output: str | Path) -> list[str]:
    """The plain `cookiecutter --no-input` a user runs (the template's path or URL goes last)."""
    return [
        sys.executable,
        "-m",
        "cookiecutter",
        "--no-input",
        "--config-file",
        str(config),
        "-o",
        str(output),
    ]


def cruft_commit(project: Path) -> str:
    return json.loads((project / ".cruft.json").read_text(encoding="utf-8"))["commit"]


def template_update(project: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return run(["make", "template-update"], project, COOKIECUTTER_CONFIG=str(config))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "user")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> TemplateRepo:
    """One template repository for the module (building it takes seconds); a test that changes its work tree
    puts it back, and `bake` always returns it to `main`."""
    return build_template_repo(tmp_path_factory.mktemp("template-repo"))


@pytest.fixture
def older_bake(template: TemplateRepo, tmp_path: Path, config: Path) -> Path:
    return bake(template, template.older, tmp_path / "older", config)


@pytest.fixture
def fresh_bake(template: TemplateRepo, tmp_path: Path, config: Path) -> Path:
    return bake(template, template.current, tmp_path / "fresh", config)


@pytest.fixture
def timed() -> Iterator[None]:
    start = time.monotonic()
    yield
    print(f"took {time.monotonic() - start:.1f} s")


# --------------------------------------------------------------------------------------- recording the source
def test_a_plain_cookiecutter_bake_records_template_and_commit_as_cruft_does(
    template: TemplateRepo, fresh_bake: Path, tmp_path: Path, config: Path
) -> None:
    """The hook's .cruft.json is byte for byte what `cruft create` writes for the same commit and answers."""
    state = json.loads((fresh_bake / ".cruft.json").read_text(encoding="utf-8"))
    assert state["template"] == str(template.path)
    assert state["commit"] == template.current
    assert state["directory"] is None
    answers = json.loads((fresh_bake / ".cookiecutter.json").read_text(encoding="utf-8"))["cookiecutter"]
    assert {key: state["context"]["cookiecutter"][key] for key in answers} == answers
    assert not any(
        key in state["context"]["cookiecutter"] for key in ("_repo_dir", "_output_dir", "_checkout")
    )

    created = tmp_path / "created"
    cruft = [
        sys.executable,
        "-m",
        "cruft",
        "create",
        "--no-input",
        "--output-dir",
        str(created),
        str(template.path),
    ]
    proc = run(cruft, tmp_path, COOKIECUTTER_CONFIG=str(config))
    assert proc.returncode == 0, proc.stderr
    project = created / fresh_bake.name
    assert (project / ".cruft.json").read_text(encoding="utf-8") == (fresh_bake / ".cruft.json").read_text(
        encoding="utf-8"
    )
    assert differing(tree(project), tree(fresh_bake)) == set()

    check = run([sys.executable, "-m", "cruft", "check", "--project-dir", str(fresh_bake)], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "up to date" in check.stdout


def test_a_bake_cookiecutter_cloned_records_the_url_it_cloned_from(
    template: TemplateRepo, tmp_path: Path, config: Path
) -> None:
    """`cookiecutter gh:<org>/<template>` clones into ~/.cookiecutters; a git+file:// URL is cloned alike,
    offline (cookiecutter's vcs.identify_repo wants `git` in the URL). cruft must clone what git cloned (the
    clone's origin: the URL without `git+`), not the cache."""
    url = template.path.as_uri()
    command = [*cookiecutter_cli(config, "out"), f"git+{url}"]
    proc = run(command, tmp_path)

    assert proc.returncode == 0, proc.stderr
    project = tmp_path / "out" / "ml-project"
    state = json.loads((project / ".cruft.json").read_text(encoding="utf-8"))
    assert (state["template"], state["commit"]) == (url, template.current)
    assert state["context"]["cookiecutter"]["_template"] == url
    check = run([sys.executable, "-m", "cruft", "check", "--project-dir", str(project)], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_bake_of_a_relative_template_path_records_its_absolute_path(
    template: TemplateRepo, tmp_path: Path, config: Path
) -> None:
    """`cookiecutter .` (the root `make demo`): the hook runs in the new project, not where `.` was meant."""
    output = tmp_path / "relative"
    command = cookiecutter_cli(config, output)
    proc = run([*command, "."], template.path)

    assert proc.returncode == 0, proc.stderr
    state = json.loads((output / "ml-project" / ".cruft.json").read_text(encoding="utf-8"))
    assert (state["template"], state["commit"]) == (str(template.path), template.current)


def test_check_sees_an_older_bake_is_out_of_date(
    older_bake: Path, template: TemplateRepo, config: Path
) -> None:
    assert cruft_commit(older_bake) == template.older
    proc = run(["make", "template-check"], older_bake, COOKIECUTTER_CONFIG=str(config))
    assert proc.returncode != 0
    assert "out of date" in proc.stdout + proc.stderr


def test_a_template_with_uncommitted_changes_is_not_baked(
    template: TemplateRepo, tmp_path: Path, config: Path
) -> None:
    """A commit that does not hold what was baked would pin the project's platform at the wrong code and make
    every update wrong (issue 31): the bake stops, says why and what to do, and leaves no project behind."""
    makefile = template.path / SLUG / "Makefile"
    makefile.write_text(makefile.read_text(encoding="utf-8") + "# not committed\n", encoding="utf-8")
    try:
        proc = run([*cookiecutter_cli(config, "out"), str(template.path)], tmp_path)
    finally:
        git(template.path, "checkout", "--", ".")
    assert git(template.path, "status", "--porcelain") == ""
    assert proc.returncode != 0
    assert not (tmp_path / "out" / "ml-project").exists()
    assert "ERROR: platform_repository: the template at" in proc.stderr
    assert "uncommitted changes" in proc.stderr and "commit them and bake again" in proc.stderr


def test_a_template_that_is_no_git_checkout_is_not_baked(tmp_path: Path, config: Path) -> None:
    """An unzipped copy has no commit to pin the platform at: the bake stops and names it."""
    copy = tmp_path / "unzipped"
    copy.mkdir()
    copy_template(copy)
    proc = run(
        [*cookiecutter_cli(config, "out"), str(copy)],
        tmp_path,
        GIT_CEILING_DIRECTORIES=str(tmp_path),  # tmp inside some other checkout must not count as one
    )
    assert proc.returncode != 0
    assert not (tmp_path / "out" / "ml-project").exists()
    assert "ERROR: platform_repository:" in proc.stderr and "is not a git checkout" in proc.stderr


# ------------------------------------------------------------------------------------------------ updating
def test_the_older_bake_differs_in_exactly_the_scripted_files(
    older_bake: Path, fresh_bake: Path, template: TemplateRepo
) -> None:
    callers = platform_callers(fresh_bake, template.current)
    assert {".github/workflows/ci.yml", "README.md"} <= callers
    # The new page links the manual too: the older bake has no such page to pin.
    assert platform_callers(older_bake, template.older) == callers - {NEW_ONLY_PAGE}
    assert differing(tree(older_bake), tree(fresh_bake)) == CHANGED | callers


def test_update_brings_an_older_bake_to_a_fresh_bake_of_the_current_commit(
    older_bake: Path, fresh_bake: Path, template: TemplateRepo, config: Path, timed: None
) -> None:
    proc = template_update(older_bake, config)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Template: {template.path} (from .cruft.json)" in proc.stdout  # whose hooks are about to run
    assert f"to {template.current[:12]}" in proc.stdout
    assert cruft_commit(older_bake) == template.current
    assert differing(tree(older_bake), tree(fresh_bake)) == set()
    # The uv.lock the update wrote agrees with the pyproject.toml it wrote; the first `uv run --locked`
    # installs the project from it as `make install` does (the same sync), then its own ruff and tests run.
    lock = run(["uv", "lock", "--check"], older_bake, **platform_from(template))
    assert lock.returncode == 0, lock.stderr
    for command in (["ruff", "check", "."], ["ruff", "format", "--check", "."]):
        done = run(["uv", "run", "--locked", "--extra", "cpu", *command], older_bake, timeout=600,
                   **platform_from(template))  # fmt: skip
        assert done.returncode == 0, f"{command}: {done.stdout[-3000:]}{done.stderr[-2000:]}"
    tests = run(["uv", "run", "--locked", "--extra", "cpu", "pytest", "-q", "-p", "no:cacheprovider",
                 *PROJECT_TESTS], older_bake, **platform_from(template))  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-3000:]
    assert " passed" in tests.stdout and " failed" not in tests.stdout
    # Committed, a second run has nothing left to do.
    git(older_bake, "add", "-A")
    git(older_bake, "commit", "-q", "-m", "template update")
    again = template_update(older_bake, config)
    assert again.returncode == 0, again.stderr
    assert "nothing changed" in again.stdout


def test_platform_update_moves_an_older_bakes_pin_to_the_current_commit(
    older_bake: Path, fresh_bake: Path, template: TemplateRepo, timed: None
) -> None:
    """Item 3 of issue 31: `make platform-update` takes the older bake's platform to the template's current
    commit (pyproject.toml and uv.lock together, as a fresh bake pins it), prints the changelog between the
    two versions and asks for `make bootstrap`, since the launch roles trust the platform's workflows at the
    pinned commit."""
    proc = run(["make", "platform-update", "TO=main"], older_bake, timeout=600, **platform_from(template))

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (
        f"from {template.older[:12]} (version {OLDER_PLATFORM_VERSION}) to main "
        f"({template.current[:12]}, version {PLATFORM_VERSION})"
    ) in proc.stdout
    current = (TEMPLATE_ROOT / "platform" / "CHANGELOG.md").read_text(encoding="utf-8")
    assert newest_release(current).strip().splitlines()[0] in proc.stdout  # the release's heading
    assert (
        "Then run, in this order:\n  make bootstrap (the launch roles trust the platform's workflows"
        in proc.stdout
    )
    status = git(older_bake, "status", "--porcelain", "--untracked-files=all")
    callers = platform_callers(fresh_bake, template.current) - {NEW_ONLY_PAGE}  # a page the older bake lacks
    moved = {line.split()[-1] for line in status.splitlines()}
    assert moved == {"pyproject.toml", "uv.lock", *callers}, status
    for name in sorted(callers):  # the workflows call the platform where a fresh bake of that commit does
        assert (older_bake / name).read_bytes() == (fresh_bake / name).read_bytes(), name
    for name in ("pyproject.toml", "uv.lock"):  # the pin reads as a fresh bake's of the current commit
        pins = [
            {
                line
                for line in (project / name).read_text(encoding="utf-8").splitlines()
                if "gpu-runner" in line
            }
            for project in (older_bake, fresh_bake)
        ]
        assert pins[0] == pins[1], name
    lock = run(["uv", "lock", "--check"], older_bake, **platform_from(template))
    assert lock.returncode == 0, lock.stderr


def test_update_refuses_a_dirty_tree_and_changes_nothing(older_bake: Path, config: Path) -> None:
    (older_bake / "notes.txt").write_text("work in progress\n", encoding="utf-8")
    before = tree(older_bake)

    proc = template_update(older_bake, config)

    assert proc.returncode != 0
    assert "not clean" in proc.stderr and "?? notes.txt" in proc.stderr
    assert "Commit or stash" in proc.stderr
    assert tree(older_bake) == before


def test_a_line_both_sides_changed_after_the_bake_commit_is_a_conflict_naming_the_file(
    older_bake: Path, template: TemplateRepo, config: Path
) -> None:
    """Edited in a later commit: git apply -3 finds the old blob, leaves conflict markers with both lines."""
    makefile = older_bake / "Makefile"
    makefile.write_text(
        makefile.read_text(encoding="utf-8").replace(OLD_WORKERS, USER_WORKERS), encoding="utf-8"
    )
    git(older_bake, "commit", "-q", "-am", "four test workers")
    # `make template-diff` (cruft diff): the project's line against the template's at the recorded commit.
    diff = run(["make", "template-diff"], older_bake, COOKIECUTTER_CONFIG=str(config))
    assert diff.returncode == 0, diff.stderr
    assert f"-{USER_WORKERS}" in diff.stdout and f"+{OLD_WORKERS}" in diff.stdout

    proc = template_update(older_bake, config)

    assert proc.returncode != 0, proc.stdout
    assert "Makefile: conflict markers" in proc.stderr
    text = makefile.read_text(encoding="utf-8")
    assert "<<<<<<< " in text and ">>>>>>> " in text
    assert USER_WORKERS in text and NEW_WORKERS in text
    # The hunks without a conflict went in; the rest of the update is not held back.
    assert (older_bake / NEW_ONLY_PAGE).is_file()
    assert not (older_bake / OLD_ONLY_PAGE).exists()
    assert cruft_commit(older_bake) == template.current


def test_a_line_both_sides_changed_in_the_bake_commit_is_a_rejected_hunk_naming_the_file(
    template: TemplateRepo, tmp_path: Path, config: Path
) -> None:
    """Edited before the first commit: git has no blob of the pristine file, so cruft falls back to
    `git apply --reject`, which leaves the template's hunk in Makefile.rej beside the user's line."""
    git(template.path, "checkout", "-q", template.older)
    try:
        project = Path(cookiecutter(str(template.path), no_input=True, output_dir=str(tmp_path / "edited"),
                                    config_file=str(config)))  # fmt: skip
    finally:
        git(template.path, "checkout", "-q", "main")
    makefile = project / "Makefile"
    makefile.write_text(
        makefile.read_text(encoding="utf-8").replace(OLD_WORKERS, USER_WORKERS), encoding="utf-8"
    )
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "baked, then four test workers")

    proc = template_update(project, config)

    assert proc.returncode != 0, proc.stdout
    assert "Makefile.rej: the template's hunks that did not apply to Makefile" in proc.stderr
    assert USER_WORKERS in makefile.read_text(encoding="utf-8")
    rejected = (project / "Makefile.rej").read_text(encoding="utf-8")
    assert f"-{OLD_WORKERS}" in rejected and f"+{NEW_WORKERS}" in rejected
    assert (project / NEW_ONLY_PAGE).is_file()


def test_the_project_renders_with_the_cookiecutter_the_template_is_tested_with() -> None:
    """cruft renders both template versions with the project's locked cookiecutter: the same pin as here."""
    root = tomllib.loads((TEMPLATE_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = (TEMPLATE_ROOT / SLUG / "pyproject.toml").read_text(encoding="utf-8")
    (pin,) = [entry for entry in root["dependency-groups"]["dev"] if entry.startswith("cookiecutter")]
    assert f'  "{pin}",\n' in project.split("template = [", 1)[1].split("]", 1)[0]
