"""The project's Makefile as a person runs it: a target's recipe as the words its shell is given.

Used by the tests that parse `make bootstrap` and `make doctor` with the runner's own CLI parser, so the
README's commands stay ones the CLI accepts.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path


def make_command(makefile: Path, target: str) -> list[str]:
    """The words of `target`'s recipe: continuation lines joined, every `NAME ?= value` default substituted,
    and the target's own `<TARGET>_ARGS` (a person's extra flags, empty unless given) left out."""
    text = makefile.read_text()
    recipe = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, flags=re.MULTILINE)
    assert recipe, f"no {target} target in the Makefile"
    command = recipe.group(1).replace("\\\n", " ").replace(f"$({target.upper()}_ARGS)", "")
    for name, value in re.findall(r"^(\w+) \?= (.*)$", text, flags=re.MULTILINE):
        command = command.replace(f"$({name})", value)
    return shlex.split(command)
