"""A project's YAML config files (configs/train.yaml, configs/sweep.yaml): the top-level mapping read with an error
that names the file and what to pass, and pydantic's validation errors as one line per field, so a typo fails
with its dotted path and the fix instead of a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # the caller's config is pydantic; this module only reads its errors
    from pydantic import ValidationError


def field_lines(error: ValidationError, hidden: tuple[str, ...] = ()) -> list[str]:
    """One `<dotted.field>: <what is wrong> (got <value>)` line per error. `hidden`: location parts left out of
    the path (a discriminated union puts its tag, such as 'float', into the location)."""
    lines = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"] if part not in hidden) or "<root>"
        if item["type"] == "extra_forbidden":
            lines.append(f"{field}: unknown key (remove it or fix its spelling)")
        elif item["type"] in ("union_tag_invalid", "union_tag_not_found"):
            given = item.get("input")
            tag = given.get("type") if isinstance(given, dict) else given
            lines.append(f"{field}.type: must be one of {', '.join(hidden)} (got {tag!r})")
        else:
            # pydantic prefixes a validator's own text with "Value error, ", which tells the user nothing.
            message = item["msg"].removeprefix("Value error, ")
            lines.append(f"{field}: {message} (got {item.get('input')!r})")
    return lines


def invalid(source: str, lines: list[str]) -> str:
    """The message of a file with bad fields: `<source>: N invalid field(s)` and one indented line each."""
    return f"{source}: {len(lines)} invalid field(s)\n" + "\n".join(f"  {line}" for line in lines)


def read_yaml_mapping(
    path: str | Path, error: type[Exception], missing: str, top_level: str, empty_ok: bool = True
) -> dict[str, Any]:
    """A YAML file's top-level mapping, or `error` saying what is wrong with the file: `missing` (the flag that
    names it) when it is absent, `top_level` (what it should hold) when it is not a mapping."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as problem:
        raise error(f"{path}: not valid YAML: {problem}") from None
    if raw is None and empty_ok:
        raw = {}
    if not isinstance(raw, dict):
        raise error(f"{path}: top level must be a mapping {top_level}")
    return raw
