"""The project's Makefile as a person runs it: a target's recipe as the words its shell is given.

Used by tests/test_make_targets.py, which parses every `gpu-runner` command of the Makefile with the pinned
platform's own CLI parser, so the README's commands stay ones the CLI accepts.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

# A person's extra flags (BOOTSTRAP_ARGS, DOCTOR_ARGS, ...): empty unless given on the command line.
EXTRA_FLAGS = re.compile(r"\$\(\w+_ARGS\)")
# `$(if $(TO),--to $(TO))`: make's conditional, empty while its variable is unset (as it is by default).
CONDITIONAL = re.compile(r"\$\(if \$\(\w+\),(?:[^()]|\$\(\w+\))*\)")


def make_command(makefile: Path, target: str) -> list[str]:
    """The words of `target`'s recipe: continuation lines joined, every `NAME ?= value` default substituted, and
    the extra flags and conditionals that are empty by default left out."""
    text = makefile.read_text()
    recipe = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, flags=re.MULTILINE)
    assert recipe, f"no {target} target in the Makefile"
    command = CONDITIONAL.sub("", EXTRA_FLAGS.sub("", recipe.group(1).replace("\\\n", " ")))
    for name, value in re.findall(r"^(\w+) \?= (.*)$", text, flags=re.MULTILINE):
        command = command.replace(f"$({name})", value)
    return shlex.split(command)
