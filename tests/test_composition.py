"""benchmarks/composition.py's table of the team's part (what `make bench` measures issue 31's bake targets
with) names real files of a default bake, and every file of the bake is counted once."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from conftest import TEMPLATE_ROOT, Bake


def composition_module() -> ModuleType:
    path = TEMPLATE_ROOT / "benchmarks" / "composition.py"
    spec = importlib.util.spec_from_file_location("composition", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_pattern_names_a_file_of_a_default_bake_and_every_file_counts_once(bake: Bake) -> None:
    composition = composition_module()
    project = Path(bake().project_path)
    assert composition.unmatched_patterns(project) == []
    parts = composition.composition(project)
    files = [name for name in composition.tracked_files(project) if name != "uv.lock"]
    assert sum(part.files for part in parts.values()) == len(files)
    assert parts["yours"].files == len([n for n in files if composition.matches(n, composition.YOURS)]) > 0


def test_a_git_repository_counts_what_git_tracks(tmp_path: Path) -> None:
    composition = composition_module()
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "train.yaml").write_text("a: 1\nb: 2\n", encoding="utf-8")
    (tmp_path / "ignored.txt").write_text("x\n", encoding="utf-8")
    (tmp_path / ".gitignore").write_text("ignored.txt\n", encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    parts = composition.composition(tmp_path)
    assert parts["yours"].lines == 2 and parts["scaffolding"].files == 1 and parts["platform"].files == 0
