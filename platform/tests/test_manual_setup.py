"""The manual's setup page (platform/manual/setup.md) against doctor: the Preflight table names every check
`make doctor` prints, the "Secrets and variables" table every setting doctor checks, and every setup section a
doctor fix points to exists. That a full doctor run prints exactly `EVERY_CHECK` is tests/runner/test_doctor.py's;
that the settings table names what the workflows read is the template's tests/test_manual.py."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_runner.doctor import doctor_branch, doctor_github, doctor_repository
from gpu_runner_testing.doctor_report import EVERY_CHECK

SETUP = Path(__file__).resolve().parents[1] / "manual" / "setup.md"


def section(heading: str) -> str:
    return SETUP.read_text(encoding="utf-8").split(heading, 1)[1].split("\n#", 1)[0]


def test_the_preflight_table_lists_every_check_doctor_prints() -> None:
    """The quota row names both codes; every other row is one check."""
    rows = re.findall(r"^\| ([^|]+?) \| ", section("## Preflight: `make doctor`"), flags=re.MULTILINE)[1:]
    listed = set()
    for row in rows:
        if row.startswith("vCPU quota"):
            listed |= {f"vCPU quota {code}" for code in re.findall(r"`(L-[0-9A-F]+)`", row)}
        else:
            listed.add(row)
    assert listed == set(EVERY_CHECK)


def test_the_settings_table_names_every_setting_doctor_checks() -> None:
    table: dict[str, str] = {}
    for row in re.findall(r"^\| (`.+?) \| (\w+) \|", section("## Secrets and variables"), flags=re.MULTILINE):
        for name in re.findall(r"`([A-Z_]+)`", row[0]):
            table[name] = row[1].rstrip("s")
    assert table == doctor_github.REPOSITORY_SETTINGS
    assert len(table) == 12  # the parser sees every row


def test_every_setup_section_a_fix_names_exists() -> None:
    headings = set(re.findall(r"^### (.+)$", SETUP.read_text(encoding="utf-8"), flags=re.MULTILINE))
    fixes = " ".join(
        [doctor_branch.RULESET_FIX, doctor_repository.ENVIRONMENT_FIX, doctor_repository.PUBLIC_FORK_FIX]
    )
    named = set(re.findall(r"manual/setup\.md, '([^']+)'", fixes))
    assert named and named <= headings, named - headings
