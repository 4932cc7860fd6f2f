"""Shared helpers for baking the template: in-process through pytest-cookies, or through the real CLI."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from cookiecutter.generate import generate_context
from cookiecutter.main import cookiecutter
from cookiecutter.prompt import prompt_for_config
from cookiecutter.utils import create_env_with_context
from gpu_runner_testing.workflow_checks.workflow_files import iter_strings  # noqa: F401 (re-exported: the same walk the project's workflow checks use)
from template_snapshot import PLATFORM_REPOSITORY, bakeable_template, snapshot_git_env

TEMPLATE_ROOT = Path(__file__).resolve().parents[1]
COOKIECUTTER_JSON = TEMPLATE_ROOT / "cookiecutter.json"
HOOKS_DIR = TEMPLATE_ROOT / "hooks"
ANSWERS_FILE = ".cookiecutter.json"

Bake = Callable[..., Any]


def template_config() -> dict[str, Any]:
    """cookiecutter.json as written (defaults unrendered, choices as lists)."""
    return json.loads(COOKIECUTTER_JSON.read_text(encoding="utf-8"))


def default_answers(**overrides: Any) -> dict[str, Any]:
    """The answers `cookiecutter --no-input key=value ...` would produce with the tests' user config (which
    answers platform_repository: write_config), rendered by cookiecutter itself.

    Includes the private `_` keys, so the result (wrapped as {"cookiecutter": ...}) is a complete replay file.
    """
    given = {"platform_repository": PLATFORM_REPOSITORY, **overrides}
    context = generate_context(context_file=str(COOKIECUTTER_JSON), extra_context=given)
    return dict(prompt_for_config(context, no_input=True))


def public(answers: Mapping[str, Any]) -> dict[str, Any]:
    """The answers a user gave (or accepted): everything but the private `_` keys."""
    return {key: value for key, value in answers.items() if not key.startswith("_")}


def render_hook(name: str, answers: Mapping[str, Any]) -> str:
    """The Python source cookiecutter runs for hooks/<name>.py with these answers."""
    context = {"cookiecutter": dict(answers)}
    template = (HOOKS_DIR / f"{name}.py").read_text(encoding="utf-8")
    return create_env_with_context(context).from_string(template).render(**context)


def load_hook(name: str, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Execute the rendered hook as a module (its main() is not run): the hook's own tables and rules."""
    namespace: dict[str, Any] = {"__name__": f"hook_{name}"}
    exec(compile(render_hook(name, answers), str(HOOKS_DIR / f"{name}.py"), "exec"), namespace)
    return namespace


@pytest.fixture
def bake(cookies: Any) -> Bake:
    """`bake(**opts)`: bake the template in-process with `opts` as extra context; a pytest-cookies Result."""

    def _bake(**opts: Any) -> Any:
        return cookies.bake(extra_context={"platform_repository": PLATFORM_REPOSITORY, **opts},
                            template=str(bake_template()))  # fmt: skip

    return _bake


def iter_files(root: Path) -> Iterator[Path]:
    """Every file below `root`, sorted, as absolute paths."""
    return (path for path in sorted(root.rglob("*")) if path.is_file())


def text_files(root: Path) -> dict[Path, str]:
    """Every UTF-8 text file of a baked project, keyed by path relative to `root` (binary files skipped)."""
    texts = {}
    for path in iter_files(root):
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[path.relative_to(root)] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return texts


class _AnyTagLoader(yaml.SafeLoader):
    """SafeLoader that also accepts local tags such as CloudFormation's `!Ref` (kept as plain values)."""


def _construct_tagged(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


_AnyTagLoader.add_multi_constructor("!", _construct_tagged)

STRUCTURED_SUFFIXES = (".yml", ".yaml", ".toml", ".json")


def parse_structured(path: Path) -> Any:
    """Parse a .yml/.yaml (all documents), .toml or .json file; raises on a syntax error."""
    text = path.read_text(encoding="utf-8")
    if path.suffix in {".yml", ".yaml"}:
        return list(yaml.load_all(text, Loader=_AnyTagLoader))
    if path.suffix == ".toml":
        return tomllib.loads(text)
    if path.suffix == ".json":
        return json.loads(text)
    raise ValueError(f"not a structured file: {path}")


def structured_files(root: Path) -> list[Path]:
    return [path for path in iter_files(root) if path.suffix in STRUCTURED_SUFFIXES]


def platform_git_env() -> dict[str, str]:
    """Environment for a bake's uv and act: fetches of PLATFORM_REPOSITORY read this checkout."""
    return snapshot_git_env(TEMPLATE_ROOT)


@functools.cache
def bake_template() -> Path:
    """What the tests bake: a clean checkout of the working tree's snapshot (template_snapshot.py)."""
    return bakeable_template(TEMPLATE_ROOT)


def write_config(directory: Path) -> Path:
    """A cookiecutter user config that keeps clones and replay files inside `directory` (never in $HOME), and
    answers platform_repository for the bakes (PLATFORM_REPOSITORY)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "cookiecutter-config.yaml"
    settings = {
        "cookiecutters_dir": str(directory / "cookiecutters"),
        "replay_dir": str(directory / "replay"),
        "default_context": {"platform_repository": PLATFORM_REPOSITORY},
    }
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return config


def bake_project(out: Path, **answers: Any) -> Path:
    """The project rendered from this working tree's snapshot (with its hooks, no install) under `out`."""
    return Path(
        cookiecutter(
            str(bake_template()),
            no_input=True,
            output_dir=str(out / "out"),
            extra_context=answers or None,
            config_file=str(write_config(out / "cookiecutter")),
        )
    )


def write_replay(path: Path, answers: Mapping[str, Any]) -> Path:
    """A replay file: cookiecutter takes these answers verbatim (no Jinja rendering, no prompts)."""
    path.write_text(json.dumps({"cookiecutter": dict(answers)}, ensure_ascii=False), encoding="utf-8")
    return path


def run_cli(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real `cookiecutter` CLI on this template, output into `workdir/out`, cwd `workdir`."""
    (workdir / "out").mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "cookiecutter",
        "--config-file",
        str(write_config(workdir / "user")),
        "--output-dir",
        str(workdir / "out"),
        *args,
    ]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        command,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )


def cli_no_input(workdir: Path, **answers: str) -> subprocess.CompletedProcess[str]:
    """`cookiecutter --no-input <template> key=value ...` (values are rendered by Jinja, as on a terminal)."""
    pairs = [f"{key}={value}" for key, value in answers.items()]
    return run_cli(workdir, "--no-input", str(bake_template()), *pairs)


def cli_replay(workdir: Path, answers: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
    """`cookiecutter --replay-file <file> <template>`: every answer delivered verbatim, as data."""
    replay = write_replay(workdir / "replay.json", answers)
    return run_cli(workdir, "--replay-file", str(replay), str(bake_template()))
