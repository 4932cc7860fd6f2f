"""How a family adds its commands to `gpu-runner`: each family's `commands.register` adds its parsers with
`add_command`, and cli.main runs whichever the arguments name, as its `Command` says (settings, AWS, workflow)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_runner.core.aws import Aws
from gpu_runner.core.settings import Settings

# argparse keeps the subparsers' registry private; its documented add_subparsers() returns this type.
SubParsers = argparse._SubParsersAction
# Where the parsed arguments keep the command to run (set_defaults on the command's own parser).
COMMAND_KEY = "gpu_runner_command"


@dataclass(frozen=True)
class Command:
    """What cli.main needs to run one command. Exactly one of `run` and `standalone` is set.

    run: with the settings file loaded (and `--instance-type` applied to it) and an AWS session; returns the
        exit status.
    standalone: no settings and no AWS session (the cost report and the pull-request comment read MLflow and
        GitHub only); returns the exit status.
    in_workflow: needs GITHUB_REPOSITORY, which GitHub Actions sets (a command a person runs from a laptop names
        the repository with a flag instead).
    check_lines: its errors are printed as a failed check line (doctor speaks in check lines).
    narrows_instance_types: its `--instance-type` replaces the settings' instance_types (launch tries only that
        GPU type); any other command's flag of that name is its own (the MLflow server's EC2 type).
    """

    run: Callable[[argparse.Namespace, Settings, Aws], int] | None = None
    standalone: Callable[[argparse.Namespace], int] | None = None
    in_workflow: bool = True
    check_lines: bool = False
    narrows_instance_types: bool = False

    def __post_init__(self) -> None:
        if (self.run is None) == (self.standalone is None):
            raise ValueError("a Command has exactly one of run and standalone")


def add_command(
    commands: SubParsers, name: str, command: Command, **parser_options: Any
) -> argparse.ArgumentParser:
    """The parser of one command (or of one action of a command group), which runs `command`."""
    parser = commands.add_parser(name, **parser_options)
    parser.set_defaults(**{COMMAND_KEY: command})
    return parser


def command_of(args: argparse.Namespace) -> Command:
    command = getattr(args, COMMAND_KEY, None)
    if not isinstance(
        command, Command
    ):  # a group without an action: argparse's required=True refuses it first
        raise ValueError(f"no command registered for {args}")
    return command


def bool_value(value: str) -> bool:
    """A flag's true/false in the words a workflow input may use."""
    lowered = value.strip().lower()
    if lowered in {"true", "yes", "1", "on"}:
        return True
    if lowered in {"false", "no", "0", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"'{value}' is not a boolean: use true or false")


def key_value(value: str) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"'{value}' is not NAME=VALUE")
    return name, rest


def add_slot(command: argparse.ArgumentParser) -> None:
    # A string, checked before any API call (workflow_contract.slot names the flag and the fix).
    command.add_argument(
        "--slot",
        default="",
        help="a sweep's trial number: its own runner name, parameter and instance (default: none)",
    )
