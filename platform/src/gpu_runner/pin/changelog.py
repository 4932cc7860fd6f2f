"""platform/CHANGELOG.md: one `## <version> (<date>)` section per release, newest first, under an optional
`## Unreleased` section; each says what changed and what a team must do after taking it.

Versions are MAJOR.MINOR.PATCH numbers only (compared as numbers), which is all the platform uses; the
changelog's own test refuses any other heading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

UNRELEASED = "Unreleased"
HEADING = re.compile(r"^## (?P<title>.+?)\s*$", flags=re.MULTILINE)
VERSION = re.compile(r"(?P<version>\d+\.\d+\.\d+) \(\d{4}-\d{2}-\d{2}\)")

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Section:
    title: str  # "0.2.0 (2026-12-06)" or "Unreleased"
    body: str  # the lines under the heading, stripped

    @property
    def version(self) -> Version | None:
        """The release's version; None for the Unreleased section."""
        match = VERSION.fullmatch(self.title)
        return parse_version(match["version"]) if match else None


def parse_version(text: str) -> Version:
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise ValueError(f"'{text}' is not MAJOR.MINOR.PATCH")
    return int(parts[0]), int(parts[1]), int(parts[2])


def version_text(version: Version) -> str:
    return ".".join(map(str, version))


def sections(text: str) -> list[Section]:
    """Every `## ` section, in the file's order."""
    headings = list(HEADING.finditer(text))
    ends = [heading.start() for heading in headings[1:]] + ([len(text)] if headings else [])
    return [
        Section(heading["title"], text[heading.end() : end].strip())
        for heading, end in zip(headings, ends, strict=True)
    ]


def bad_headings(text: str) -> list[str]:
    """Section titles that are neither `Unreleased` (first only) nor `<version> (<date>)`."""
    bad = []
    for index, section in enumerate(sections(text)):
        if section.title == UNRELEASED and index == 0:
            continue
        if section.version is None:
            bad.append(section.title)
    return bad


def blocks(body: str) -> list[str]:
    """A section's body as blocks: a `### ` heading, or one list item with its indented continuation lines."""
    found: list[str] = []
    for line in body.splitlines():
        if line[:1].isspace() and found and not found[-1].startswith("### "):
            found[-1] += "\n" + line
        elif line.strip():
            found.append(line)
    return found


def new_items(old_body: str, new_body: str) -> str:
    """The new Unreleased body without the items the old one held; a heading left with no item is dropped."""
    already = set(blocks(old_body))
    kept = [block for block in blocks(new_body) if block.startswith("### ") or block not in already]
    return "\n".join(
        block
        for index, block in enumerate(kept)
        if not block.startswith("### ") or (index + 1 < len(kept) and not kept[index + 1].startswith("### "))
    )


def taken_with(old_text: str, new_text: str, old_version: Version) -> list[Section]:
    """What a project moving from the old commit to the new one takes: the new changelog's releases after
    `old_version`, and the items of the new Unreleased section that the old one did not already hold."""
    old_unreleased = next((s.body for s in sections(old_text) if s.title == UNRELEASED), "")
    taken = []
    for section in sections(new_text):
        if section.title == UNRELEASED:
            body = new_items(old_unreleased, section.body)
            if body:
                taken.append(Section(UNRELEASED, body))
        elif section.version is not None and section.version > old_version:
            taken.append(section)
    return taken
