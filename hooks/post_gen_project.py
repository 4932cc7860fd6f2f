"""Finish the generated project: drop optional paths, record the answers, print the next steps.

Runs inside the new project directory. Offline by design: no git, no uv, no network.
The answers arrive as data (JSON rendered with `tojson` twice), exactly as in pre_gen_project.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ANSWERS: dict[str, object] = json.loads({{ cookiecutter | tojson | tojson }})

# The one place that decides which optional paths exist: (question, answer) -> paths to delete, relative to
# the project root. Prefer this table over conditional file names (cookiecutter 2.7 still creates a directory
# whose rendered name is empty). A listed path that was not generated is a template bug and fails the run.
REMOVE_WHEN: dict[tuple[str, object], list[str]] = {
    ("license", "Proprietary"): ["LICENSE"],
}

# Answers recorded in cookiecutter's replay format, so a template update is
# `cookiecutter --replay-file .cookiecutter.json <template>`. Private keys (`_...`) come from the template.
ANSWERS_FILE = ".cookiecutter.json"
# Comma-separated answers, recorded as the templates render them (spaces around the commas dropped, as
# pre_gen_project.py's comma_list accepts them), so .cookiecutter.json agrees with configs/ and infra/.
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
        f"run `make bootstrap` (AWS) and the GitHub App steps of docs/setup.md, then\n"
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
    write_answers(root, ANSWERS)
    print(next_steps(ANSWERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
