"""The pin family's command: `gpu-runner platform-update`, run from the project's root (make platform-update)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu_runner.core.command_line import Command, SubParsers, add_command


def register(commands: SubParsers) -> None:
    update = add_command(
        commands, "platform-update", Command(standalone=_platform_update),
        help="move the project's pin of the platform (pyproject.toml, uv.lock, workflows, manual links) and show the changelog",
    )  # fmt: skip
    update.add_argument(
        "--to", default="", help="a release tag, a branch or a full commit SHA (default: the newest release)"
    )
    update.add_argument("--project", type=Path, default=Path("."), help="the project's root directory")
    update.add_argument("--uv", default="uv", help="the uv command that relocks (make passes its $(UV))")
    update.add_argument("--check", action="store_true", help="say what would change and change nothing")
    update.add_argument("--allow-downgrade", action="store_true", help="take an older version on purpose")


def _platform_update(args: argparse.Namespace) -> int:
    from gpu_runner.pin.update import platform_update

    print(platform_update(args.project, args.to, args.uv, args.check, args.allow_downgrade))
    return 0
