"""Finish the generated project: drop optional paths, record the answers and the template, print the next steps.

Runs inside the new project directory. Offline by design: no uv, no network; git only reads the template's own
checkout (`git rev-parse`, `git status`, `git remote get-url`), through `git_output` alone.
The answers arrive as data (JSON rendered with `tojson` twice), exactly as in pre_gen_project.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import NamedTuple

ANSWERS: dict[str, object] = json.loads({{ cookiecutter | tojson | tojson }})

# The one place that decides which optional paths exist: (question, answer) -> paths to delete, relative to
# the project root. Prefer this table over conditional file names (cookiecutter 2.7 still creates a directory
# whose rendered name is empty). A listed path that was not generated is a template bug and fails the run.
REMOVE_WHEN: dict[tuple[str, object], list[str]] = {
    ("license", "Proprietary"): ["LICENSE"],
}

# Answers recorded in cookiecutter's replay format (`cookiecutter --replay-file .cookiecutter.json <template>`
# rebuilds the project). Private keys (`_...`) come from the template.
ANSWERS_FILE = ".cookiecutter.json"
# The template's source and commit, in cruft's own format (cruft/_commands/create.py of cruft 2.16.0 writes
# {"template", "commit", "checkout", "context", "directory"} with utils/cruft.py's json_dumps), so a plain
# `cookiecutter gh:<org>/<template>` bake can take template updates with `make template-update` (cruft update)
# exactly like a `cruft create` bake. cruft itself writes the file after its own bakes: when the context holds
# `_commit` (cruft's utils/cookiecutter.py sets it; cookiecutter never does), this hook leaves it to cruft.
CRUFT_FILE = ".cruft.json"
# Keys cookiecutter/main.py (2.7.1) adds to the context that describe this machine's bake, not the template:
# cruft's context has none of them, and an absolute output path has no place in the repository.
LOCAL_KEYS = ("_output_dir", "_repo_dir", "_checkout")
# The gpu-runner distribution's folder in the template repository: what a bake pins by commit (issue 31).
PLATFORM_DIR = "platform"
# Where the template's files name the pin, as placeholders only this hook fills: the git source in pyproject.toml
# and the three places uv.lock records it (scripts/relock.py writes them back after locking).
PLATFORM_TOKENS = {"repository": "__platform_repository__", "commit": "__platform_commit__"}
PINNED_FILES = ("pyproject.toml", "uv.lock")
# And the files that name the platform's commit beside them: the workflows that call its reusable workflows and
# composite actions as `<owner>/<name>/.github/...@<commit>`, and the pages that link its manual at
# `https://github.com/<owner>/<name>/blob/<commit>/platform/manual/`: filled with the same pin, so the lock, the
# calls and the manual a team reads name one commit (gpu_runner.pin.project_pin moves them together).
PINNED_GITHUB_GLOBS = (
    ".github/workflows/*.yml",
    ".github/actions/*/action.yml",
    ".github/dependabot.yml",
    "README.md",
    "docs/*.md",
)
# A GitHub remote as git names it: https://github.com/o/r(.git), ssh://git@github.com/o/r(.git) or
# git@github.com:o/r(.git). Owners: letters, digits and single inner hyphens, at most 39 (GitHub's sign-up
# validation, as collected in github.com/dead-claudia/github-limits; pre_gen_project.py's GITHUB_OWNER). Names:
# ASCII letters, digits, '.', '-' and '_', at most 100, never ending in .wiki (docs.github.com, "Repository
# limits", Repository name).
GITHUB_REMOTE = re.compile(
    r"(?:https://github\.com/|ssh://git@github\.com/|git@github\.com:)"
    r"(?P<owner>[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*)/(?P<name>[A-Za-z0-9._-]{1,100}?)(?:\.git)?/?"
)
# Comma-separated answers, recorded as the templates render them (spaces around the commas dropped, as
# pre_gen_project.py's comma_list accepts them), so .cookiecutter.json agrees with configs/.
COMMA_SEPARATED = ("gpu_instance_types",)


def remove_optional_paths(root: Path, answers: dict[str, object]) -> list[str]:
    """Delete every path REMOVE_WHEN selects for `answers`; return them (relative, in table order)."""
    removed = []
    for (question, answer), paths in REMOVE_WHEN.items():
        if answers.get(question) != answer:
            continue
        for relative in paths:
            path = root / relative
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
            else:
                raise FileNotFoundError(f"REMOVE_WHEN lists {relative!r}; the template did not generate it")
            removed.append(relative)
    return removed


def canonical(key: str, value: object) -> object:
    if key in COMMA_SEPARATED and isinstance(value, str):
        return ",".join(entry.strip() for entry in value.split(","))
    return value


def write_answers(root: Path, answers: dict[str, object]) -> Path:
    public = {key: canonical(key, value) for key, value in answers.items() if not key.startswith("_")}
    path = root / ANSWERS_FILE
    text = json.dumps({"cookiecutter": public}, indent=2, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def git_output(directory: Path, *args: str) -> str | None:
    """`git -C directory args...` stdout (stripped), or None when git is missing or the command fails."""
    # GIT_DIR & co. (set when cookiecutter runs inside a git hook) would point git at another repository.
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    try:
        proc = subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True, env=env, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def template_dir(answers: dict[str, object]) -> Path | None:
    """The absolute directory cookiecutter rendered from (its `_repo_dir`), or None when it cannot be told."""
    repo_dir = answers.get("_repo_dir")
    if not isinstance(repo_dir, str) or not repo_dir:
        return None
    if os.path.isabs(repo_dir):
        return Path(repo_dir)
    # A relative template (`cookiecutter .`) is relative to the cwd cookiecutter started in, which this hook
    # (run in the new project) does not have. cookiecutter runs hooks inside `work_in(repo_dir)` (hooks.py,
    # run_hook_from_repo_dir), so its process's cwd is the template directory: /proc tells it on Linux; elsewhere
    # the shell's $PWD is the directory cookiecutter was started in.
    parent_cwd = Path(f"/proc/{os.getppid()}/cwd")
    candidates = [parent_cwd.resolve()] if parent_cwd.exists() else []
    candidates += [Path(os.environ["PWD"]) / repo_dir] if os.environ.get("PWD") else []
    return next((path.resolve() for path in candidates if (path / "cookiecutter.json").is_file()), None)


def without_credentials(url: str) -> str:
    """The URL without a user or token (`https://x-access-token:<token>@github.com/...` clones a private template):
    .cruft.json is committed, and a credential must never reach the repository. scp-like `git@host:path` stays."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in {"http", "https", "ssh", "git"} or "@" not in parts.netloc:
        return url
    if parts.scheme == "ssh" and parts.password is None:
        return url  # ssh://git@host/path: a user name, no secret
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


# A NamedTuple, not a dataclass: the tests execute this hook in a namespace that is no module in sys.modules.
class Checkout(NamedTuple):
    """The template's clean git checkout this bake was rendered from."""

    directory: Path
    commit: str
    toplevel: str
    source: str | None  # the URL cookiecutter cloned it from (no credential); None for a local checkout
    prefix: str  # the template's folder inside the repository ("" at its root)


def template_checkout(answers: dict[str, object]) -> tuple[Checkout | None, str]:
    """The checkout and commit that hold exactly what was baked, or None and the reason there is none."""
    directory = template_dir(answers)
    if directory is None:
        return None, "cookiecutter did not say which directory it rendered from"
    commit = git_output(directory, "rev-parse", "--verify", "HEAD")
    toplevel = git_output(directory, "rev-parse", "--show-toplevel")
    if not commit or not toplevel:
        return None, f"the template at {directory} is not a git checkout (a zip file or a copy)"
    # The new project itself is no change to the template when it was baked inside the template's checkout.
    inside = Path.cwd().resolve().is_relative_to(directory.resolve())
    exclude = [f":(exclude){Path.cwd().resolve().relative_to(directory.resolve())}"] if inside else []
    dirty = git_output(directory, "status", "--porcelain", "--untracked-files=normal", "--", ".", *exclude)
    if dirty is None or dirty:
        return None, (
            f"the template at {directory} has uncommitted changes, so no commit holds what was baked; commit "
            "them and bake again"
        )
    # A template cookiecutter cloned (gh:<org>/<template>, a URL, or a cached clone below ~/.cookiecutters) is
    # recorded by the URL it was cloned from, which cruft clones again for an update; one baked from a local
    # checkout by its path (as `cruft create <path>` records it). cookiecutter's _repo_dir is the _template
    # string itself for a local checkout (repository.py, determine_repo_dir).
    local = answers.get("_repo_dir") == answers.get("_template")
    origin = None if local else git_output(directory, "remote", "get-url", "origin")
    source = without_credentials(origin) if origin else None
    prefix = git_output(directory, "rev-parse", "--show-prefix") or ""
    return Checkout(directory, commit, toplevel, source, prefix), ""


def github_repository(url: str) -> str | None:
    """`owner/name` of a GitHub remote URL (https, ssh:// or scp-like `git@github.com:`; `.git` dropped), else
    None. Names as GitHub allows them (GITHUB_OWNER, GITHUB_REPOSITORY_NAME)."""
    match = GITHUB_REMOTE.fullmatch(without_credentials(url))
    if match is None or len(match["owner"]) > 39 or match["name"].endswith(".wiki"):
        return None
    return f"{match['owner']}/{match['name']}"


def platform_pin(answers: dict[str, object]) -> tuple[dict[str, str] | None, str]:
    """The GitHub repository and commit of this template that the bake's lock and workflows pin the platform at
    ({"repository", "commit"}), or None and what to do instead. The repository is the answer
    `platform_repository` when given, else the GitHub repository the template was cloned from, else the `origin`
    of a local checkout when that is on GitHub; the commit is the clean checkout's, and must hold platform/.
    Under cruft (`cruft create`, `make template-update`), whose context carries the commit it checked out
    (`_commit`) and the template it cloned (`_template`), the pin is those two."""
    if "_commit" in answers:
        return cruft_pin(answers)
    checkout, reason = template_checkout(answers)
    if checkout is None:
        return None, f"{reason} (the project pins its platform at the template's commit)"
    answered = str(answers.get("platform_repository") or "")
    origin = checkout.source or git_output(checkout.directory, "remote", "get-url", "origin") or ""
    repository = answered or github_repository(origin)
    if not repository:
        where = f"from {origin}" if origin else f"from {checkout.toplevel}, which has no origin remote"
        return None, (
            f"the template came {where}, not from a GitHub repository, so the bake cannot name where its "
            "platform comes from: bake from gh:<owner>/<template>, or answer platform_repository=<owner>/<name> "
            f"(the GitHub repository that holds commit {checkout.commit}; push it there first)"
        )
    if not github_repository(f"https://github.com/{repository}"):
        return None, f"platform_repository '{repository}' is not <owner>/<name> as GitHub spells them"
    platform = f"{checkout.commit}:{checkout.prefix}{PLATFORM_DIR}/pyproject.toml"
    if git_output(checkout.directory, "cat-file", "-e", platform) is None:
        return None, f"commit {checkout.commit} of the template has no {PLATFORM_DIR}/pyproject.toml to pin"
    return {"repository": repository, "commit": checkout.commit}, ""


def cruft_pin(answers: dict[str, object]) -> tuple[dict[str, str] | None, str]:
    """The pin of a bake cruft renders: its `_commit`, and the answer or the GitHub repository of `_template`."""
    commit, template = str(answers.get("_commit") or ""), str(answers.get("_template") or "")
    repository = str(answers.get("platform_repository") or "") or github_repository(template)
    if not re.fullmatch(r"[0-9a-f]{40}", commit):
        return None, f"cruft gave no commit of the template ({commit!r})"
    if not repository or not github_repository(f"https://github.com/{repository}"):
        return None, (
            f"the template {template} names no GitHub repository: answer platform_repository=<owner>/<name> "
            f"in .cruft.json's context (the repository that holds commit {commit})"
        )
    return {"repository": repository, "commit": commit}, ""


def write_platform_pin(root: Path, pin: dict[str, str]) -> None:
    """Fill the placeholders of PINNED_FILES and of the GitHub files that name them with the pin: the lock then
    holds exactly what uv writes for that source (the lock's own record of a git source is its URL with `rev`
    and `#<commit>`), and every `uses:` of the platform and every link to its manual names the same commit."""
    for name in PINNED_FILES:
        if PLATFORM_TOKENS["commit"] not in (root / name).read_text(encoding="utf-8"):
            raise FileNotFoundError(f"{name} has no platform pin to fill ({PLATFORM_TOKENS['commit']})")
    github = {path for glob in PINNED_GITHUB_GLOBS for path in root.glob(glob)}
    for path in [*(root / name for name in PINNED_FILES), *sorted(github)]:
        text = path.read_text(encoding="utf-8")
        for key, token in PLATFORM_TOKENS.items():
            text = text.replace(token, pin[key])
        path.write_text(text, encoding="utf-8")


def cruft_state(answers: dict[str, object]) -> tuple[dict[str, object] | None, str]:
    """The .cruft.json content for this bake, or None and the reason the template's commit cannot be recorded."""
    checkout, reason = template_checkout(answers)
    if checkout is None:
        return None, reason
    directory, commit, toplevel = checkout.directory, checkout.commit, checkout.toplevel
    source, prefix = checkout.source, checkout.prefix
    # cruft's order: cookiecutter.json's (prompt_for_config keeps it; `tojson` above sorted the keys), then
    # `_template` and `_commit`, so the first `make template-update` does not reorder the whole file.
    order = list(json.loads((directory / "cookiecutter.json").read_text(encoding="utf-8")))
    keys = sorted(answers, key=lambda key: order.index(key) if key in order else len(order))
    # Comma lists as .cookiecutter.json records them (canonical): the value cruft re-renders with.
    context = {key: canonical(key, answers[key]) for key in keys if key not in LOCAL_KEYS and key != "_template"}
    context["_template"] = source or toplevel
    context["_commit"] = commit
    state = {
        "template": source or toplevel,
        "commit": commit,
        "checkout": answers.get("_checkout"),
        "context": {"cookiecutter": context},
        "directory": prefix.rstrip("/") or None,
    }
    return state, ""


def write_cruft_state(root: Path, answers: dict[str, object]) -> str:
    """Write .cruft.json (unless cruft is baking and writes it itself); return a note when it was not written."""
    if "_commit" in answers:
        return ""
    state, reason = cruft_state(answers)
    if state is None:
        return (
            f"NOTE: {CRUFT_FILE} was not written: {reason}. Without it `make template-update` cannot take "
            "template updates; bake from a clean git checkout of the template (or `cookiecutter gh:<org>/"
            "<template>`), or link this project later with `cruft link <template-url>`."
        )
    # cruft's json_dumps (utils/cruft.py): indent 2, non-ASCII kept, one trailing newline.
    text = json.dumps(state, ensure_ascii=False, indent=2, separators=(",", ": ")) + "\n"
    (root / CRUFT_FILE).write_text(text, encoding="utf-8")
    return ""


def next_steps(answers: dict[str, object]) -> str:
    slug = answers["project_slug"]
    branch = f"{answers['train_branch_prefix']}demo"
    steps = [
        f"cd {slug}",
        "make install      # create .venv from uv.lock (CPU TensorFlow)",
        "make test         # the test suite, on CPU",
        "make train        # train locally and log the run to MLflow",
        "make mlflow-ui    # browse runs at http://127.0.0.1:5000",
        f"Later, to train on a GPU: push to github.com/{answers['github_owner']}/{answers['github_repo']}, "
        f"run `make bootstrap` (AWS) and the GitHub App steps of manual/setup.md, then\n"
        f"     git switch -c {branch} && git push -u origin {branch}",
    ]
    numbered = "\n".join(f"  {number}. {step}" for number, step in enumerate(steps, start=1))
    return f"\nCreated {slug}. Next steps:\n{numbered}\n"


def main() -> int:
    sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    root = Path.cwd()
    try:
        remove_optional_paths(root, ANSWERS)
    except FileNotFoundError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 1
    # The platform the project runs is this template's own commit: no pin, no bake (never a broken reference).
    pin, why = platform_pin(ANSWERS)
    if pin is None:
        print(f"ERROR: platform_repository: {why}", file=sys.stderr)
        return 1
    write_platform_pin(root, pin)
    write_answers(root, ANSWERS)
    note = write_cruft_state(root, ANSWERS)
    if note:
        print(note, file=sys.stderr)
    print(next_steps(ANSWERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
