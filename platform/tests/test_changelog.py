"""platform/CHANGELOG.md: the sections a platform update prints, and the file's own rules."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gpu_runner.pin import changelog
from gpu_runner.pin.changelog import Section

PLATFORM = Path(__file__).resolve().parents[1]
MUST_DO = "### What a team must do"

OLD = """# Changelog

## Unreleased

### Fixed
- a teardown retry
  that spans two lines

## 0.2.0 (2026-12-06)

### Changed
- the platform is a dependency
"""
NEW = """# Changelog

## Unreleased

### Fixed
- a teardown retry
  that spans two lines
- a new fix

### What a team must do
- Nothing.

## 0.3.0 (2027-01-10)

### Changed
- the stack gained a role

## 0.2.0 (2026-12-06)

### Changed
- the platform is a dependency
"""


def test_sections_and_versions_are_read_in_the_files_order() -> None:
    found = changelog.sections(NEW)
    assert [section.title for section in found] == ["Unreleased", "0.3.0 (2027-01-10)", "0.2.0 (2026-12-06)"]
    assert [section.version for section in found] == [None, (0, 3, 0), (0, 2, 0)]
    assert found[1].body == "### Changed\n- the stack gained a role"


def test_a_move_takes_the_newer_releases_and_only_the_new_unreleased_items() -> None:
    taken = changelog.taken_with(OLD, NEW, (0, 2, 0))
    assert taken == [
        Section("Unreleased", "### Fixed\n- a new fix\n### What a team must do\n- Nothing."),
        Section("0.3.0 (2027-01-10)", "### Changed\n- the stack gained a role"),
    ]
    # Between two commits of the same release with nothing new, nothing is taken.
    assert changelog.taken_with(NEW, NEW, (0, 3, 0)) == []
    # From a commit whose changelog had no section yet (or no file), every newer release is taken.
    assert [section.title for section in changelog.taken_with("# Changelog\n", NEW, (0, 0, 0))] == [
        "Unreleased",
        "0.3.0 (2027-01-10)",
        "0.2.0 (2026-12-06)",
    ]
    assert changelog.sections("") == []


@pytest.mark.parametrize("title", ["1.0 (2026-12-06)", "0.2.0", "v0.2.0 (2026-12-06)", "Next"])
def test_a_heading_that_is_no_release_is_named(title: str) -> None:
    assert changelog.bad_headings(f"# C\n\n## Unreleased\n\n## {title}\n- x\n") == [title]
    # Unreleased is a release's place only at the top.
    assert changelog.bad_headings("# C\n\n## 0.1.0 (2026-01-01)\n- x\n\n## Unreleased\n") == ["Unreleased"]


def test_the_platforms_changelog_names_its_version_and_what_a_team_must_do() -> None:
    text = (PLATFORM / "CHANGELOG.md").read_text(encoding="utf-8")
    assert changelog.bad_headings(text) == []
    releases = [section for section in changelog.sections(text) if section.version is not None]
    version = tomllib.loads((PLATFORM / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert releases and releases[0].version == changelog.parse_version(version), (releases[0].title, version)
    assert [section.version for section in releases] == sorted(
        (section.version for section in releases), reverse=True
    )
    assert [section.title for section in changelog.sections(text) if MUST_DO not in section.body] == []
