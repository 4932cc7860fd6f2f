"""The template's own Python (tests, scripts, benchmarks, and the platform under its own ruff settings in
platform/pyproject.toml) is ruff-clean, as `make lint` demands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ["tests", "scripts", "benchmarks", "platform"]


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_template_python_passes_ruff_check_and_format() -> None:
    check = ruff("check", *TARGETS)
    assert check.returncode == 0, check.stdout + check.stderr
    fmt = ruff("format", "--check", *TARGETS)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_the_check_fails_on_a_long_line(tmp_path: Path) -> None:
    # Negative control: the template's ruff settings, on a file with a line over their 110 characters.
    bad = tmp_path / "probe.py"
    bad.write_text(f'"""{"word " * 30}"""\n')  # one unbreakable token would be exempt
    result = ruff("check", "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert result.returncode == 1 and "E501" in result.stdout, result.stdout + result.stderr
