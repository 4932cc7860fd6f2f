"""Validate every answer before cookiecutter writes the project; exit 1 with one line per bad answer.

Cookiecutter renders this file with Jinja before running it. The answers arrive as ONE JSON document that is
rendered with `tojson` twice, i.e. as a Python string literal holding JSON: quotes, backslashes, unicode or
template syntax typed into a free-text answer are data here and can never become code.

Each rule is a plain function `check_<field>(value) -> problem | None`; `problem` is the "how to fix" text of
    ERROR: <field> '<value>' is invalid: <how to fix>
followed by the one command that bakes again with every answer given (the bad ones last, to be corrected):
cookiecutter has asked all its questions before this hook runs, so without it a typo costs all the answers.
"""

from __future__ import annotations

import ipaddress
import json
import keyword
import os
import re
import shlex
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

ANSWERS: dict[str, object] = json.loads({{ cookiecutter | tojson | tojson }})

# Must stay equal to the "license" choices in cookiecutter.json (a template test compares them).
LICENSES = ("MIT", "Apache-2.0", "BSD-3-Clause", "Proprietary")
# configs/gpu-runner.yaml `backend` (platform/src/gpu_runner/core/settings.py BACKENDS, which refuses anything else).
GPU_BACKENDS = ("runner", "batch")

# Import names the generated project (or its tooling) already uses; a package with one of these names would
# shadow it. The standard library is added from sys.stdlib_module_names.
THIRD_PARTY_IMPORT_NAMES = frozenset(
    {
        "boto3", "botocore", "conftest", "google", "h5py", "hatchling", "keras", "matplotlib", "mlflow",
        "moto", "numpy", "pandas", "pip", "psutil", "pydantic", "pytest", "ruff", "s3transfer", "scipy",
        "setuptools", "sklearn", "src", "tensorboard", "tensorflow", "test", "tests", "tf_keras", "yaml",
    }
)
SHADOWED_NAMES = THIRD_PARTY_IMPORT_NAMES | frozenset(sys.stdlib_module_names)

SLUG = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
PACKAGE = re.compile(r"[a-z_][a-z0-9_]*")
GITHUB_OWNER = re.compile(r"[A-Za-z0-9]+(-[A-Za-z0-9]+)*")
GITHUB_REPO = re.compile(r"[A-Za-z0-9._-]{1,100}")
AWS_REGION = re.compile(r"(us|eu|ap|sa|ca|me|af|il|mx|us-gov|cn)-[a-z]+-[0-9]")
INSTANCE_TYPE = re.compile(r"(?P<family>[a-z][a-z0-9-]*)\.(?P<size>[a-z0-9][a-z0-9-]*)")
BRANCH_CHARS = re.compile(r"[A-Za-z0-9._/-]+")
DIGITS = re.compile(r"[0-9]+")
BUCKET_CHARS = re.compile(r"[a-z0-9.-]+")

GPU_FAMILY_PREFIXES = ("g", "p")
# Must stay equal to DLAMI_GPU_FAMILIES in platform/src/gpu_runner/core/settings.py (a template test compares them): the GPU
# families the default AMI (Deep Learning Base OSS Nvidia Driver GPU AMI, Ubuntu 22.04) lists as supported in its
# release notes of 2026-01-30. P3 is not one of them.
DLAMI_GPU_FAMILIES = (
    "g4dn", "g5", "g6", "gr6", "g6e", "g7e", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300",
)  # fmt: skip
# The bundled, dated table of the GPU types AWS offers per region (DescribeInstanceTypeOfferings, see its "source").
OFFERINGS_GLOB = "platform/src/gpu_runner/core/offerings.json"
BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
# Control characters and Unicode line/paragraph separators: they break a one-line answer (and YAML).
CONTROL_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})

# At least 20: train.yml's train job times out 15 minutes before the instance's max lifetime (boot margin).
MAX_RUNTIME_RANGE = (20, 2880)
MAX_PACKAGE_LENGTH = 40


def is_control(char: str) -> bool:
    return unicodedata.category(char) in CONTROL_CATEGORIES


def escaped(char: str) -> str:
    """`\\n`, `\\t`, `\\x00`, `\\u2028`: how a control character is shown in a message."""
    return repr(char)[1:-1]


def free_text_problem(value: object, *, max_length: int) -> str | None:
    """Shared rule for free text: a non-blank single line of at most `max_length` characters."""
    if not isinstance(value, str):
        return "answer with text"
    if not value.strip():
        return "it must not be empty"
    if bad := sorted({escaped(char) for char in value if is_control(char)}):
        return f"remove the control character(s) {' '.join(bad)}; use a single line of text"
    if len(value) > max_length:
        return f"it has {len(value)} characters; shorten it to at most {max_length}"
    return None


def whole_number(value: object) -> int | None:
    """An int, or a string of ASCII digits (what the command line gives); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and DIGITS.fullmatch(value):
        return int(value)
    return None


def check_project_name(value: object) -> str | None:
    return free_text_problem(value, max_length=200)


def check_description(value: object) -> str | None:
    return free_text_problem(value, max_length=300)


def check_author_name(value: object) -> str | None:
    return free_text_problem(value, max_length=200)


def check_mlflow_experiment_name(value: object) -> str | None:
    return free_text_problem(value, max_length=200)


def check_project_slug(value: object) -> str | None:
    if not isinstance(value, str) or not SLUG.fullmatch(value):
        return (
            "use lowercase letters and digits separated by single dashes, starting with a letter "
            "(e.g. 'ml-project'); it is also the distribution name"
        )
    if len(value) > 50:
        return f"it has {len(value)} characters; shorten it to at most 50"
    return None


def check_package_name(value: object) -> str | None:
    if not isinstance(value, str) or not PACKAGE.fullmatch(value):
        return (
            "use lowercase letters, digits and underscores, not starting with a digit "
            "(e.g. 'ml_project'); dashes are not allowed in an import name"
        )
    if len(value) > MAX_PACKAGE_LENGTH:
        # Longer import lines would be wrapped differently by ruff format, so the baked code would not lint clean.
        return f"use at most {MAX_PACKAGE_LENGTH} characters (this one has {len(value)})"
    if keyword.iskeyword(value):
        return f"'{value}' is a Python keyword; pick another name (e.g. '{value}_project')"
    if value in SHADOWED_NAMES:
        return (
            f"it would shadow the '{value}' module the project depends on; "
            f"pick a project-specific name (e.g. '{value}_project')"
        )
    return None


def check_github_owner(value: object) -> str | None:
    if not isinstance(value, str) or not GITHUB_OWNER.fullmatch(value) or len(value) > 39:
        return (
            "a GitHub user or organisation name has 1-39 letters, digits or single hyphens "
            "and does not start or end with a hyphen"
        )
    return None


def check_github_repo(value: object) -> str | None:
    if not isinstance(value, str) or not GITHUB_REPO.fullmatch(value):
        return "use 1-100 characters from letters, digits, '.', '_' and '-'"
    if value in {".", ".."}:
        return "'.' and '..' are reserved; pick a real name"
    if value.lower().endswith(".git"):
        return "drop the '.git' suffix (GitHub removes it)"
    return None


def check_platform_repository(value: object) -> str | None:
    """Empty (the hook takes the GitHub repository the template came from) or owner/name as GitHub spells them."""
    if value == "":
        return None
    owner, _, name = value.partition("/") if isinstance(value, str) else ("", "", "")
    if check_github_owner(owner) or check_github_repo(name):
        return (
            "give the template's GitHub repository as owner/name (e.g. 'your-org/mlops-template'), or leave it "
            "empty"
        )
    return None


def check_aws_region(value: object) -> str | None:
    if not isinstance(value, str) or not AWS_REGION.fullmatch(value):
        return "use an AWS region code such as 'eu-west-1', 'us-east-1' or 'us-gov-west-1'"
    return None


def offerings_table(repo_dir: object) -> dict[str, object] | None:
    """The template's offerings table, found from cookiecutter's `_repo_dir`; None when it cannot be read."""
    if not isinstance(repo_dir, str) or not repo_dir:
        return None
    found = sorted(Path(repo_dir).glob(OFFERINGS_GLOB))
    try:
        return json.loads(found[0].read_text(encoding="utf-8")) if found else None
    except (OSError, ValueError):
        return None


def offered_problem(entries: list[str], region: object, table: dict[str, object] | None) -> str | None:
    """A GPU entry the table says AWS does not offer in `region` (regions it does not list are not judged)."""
    regions = table.get("regions") if table else None
    if not isinstance(regions, dict) or region not in regions:
        return None
    offered = regions[region]
    as_of = table.get("as_of", "undated") if table else "undated"
    for position, entry in enumerate(entries, start=1):
        if entry.startswith(GPU_FAMILY_PREFIXES) and entry not in offered:
            if not offered:
                return f"{region} offers no GPU instance type (AWS, as of {as_of}); choose another aws_region"
            small = [t for t in offered if t.endswith(".xlarge")] or list(offered)
            return (
                f"entry {position} '{entry}' is not offered in {region} (AWS's instance type offerings as of "
                f"{as_of}); GPU types offered there include {', '.join(small)} (e.g. '{','.join(small[:2])}')"
            )
    return None


def comma_list(value: str) -> list[str]:
    """The entries of a comma-separated answer, spaces around the commas dropped ('a, b' is 'a,b'): what a
    person types. The templates render the same canonical form (`split(',') | map('trim')`)."""
    return [entry.strip() for entry in value.split(",")]


def check_gpu_instance_types(
    value: object, region: object = None, table: dict[str, object] | None = None
) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return "list at least one GPU instance type, e.g. 'g4dn.xlarge,g5.xlarge'"
    entries = comma_list(value)
    seen: set[str] = set()
    for position, entry in enumerate(entries, start=1):
        if not entry:
            return f"entry {position} is empty; separate instance types with single commas"
        if not INSTANCE_TYPE.fullmatch(entry):
            return (
                f"entry {position} '{entry}' is not an instance type; write family.size in lowercase, "
                "e.g. 'g4dn.xlarge' or 'p4d.24xlarge'"
            )
        if entry in seen:
            return f"entry {position} '{entry}' is listed twice; remove the duplicate"
        seen.add(entry)
    if not any(entry.startswith(GPU_FAMILY_PREFIXES) for entry in entries):
        return "none of these is a GPU instance type; include a g* or p* family such as 'g4dn.xlarge'"
    for position, entry in enumerate(entries, start=1):
        family = entry.split(".", 1)[0]
        if entry.startswith(GPU_FAMILY_PREFIXES) and family not in DLAMI_GPU_FAMILIES:
            return (
                f"entry {position} '{entry}': the Deep Learning Base OSS Nvidia Driver AMI does not support the "
                f"{family} family (it supports {', '.join(DLAMI_GPU_FAMILIES)}); use e.g. 'g4dn.xlarge,g5.xlarge'"
            )
    return offered_problem(entries, region, table)


def check_use_spot(value: object) -> str | None:
    # The command line's "yes"/"no"/"true"/"false" are already booleans here (cookiecutter converts them);
    # a string can only come from a hand-written replay file, and "false" would be truthy in the templates.
    if not isinstance(value, bool):
        return "answer true or false (JSON booleans; on the command line yes/no also work)"
    return None


def check_gpu_backend(value: object) -> str | None:
    if value not in GPU_BACKENDS:
        return f"choose one of {', '.join(GPU_BACKENDS)}"
    return None


def check_train_branch_prefix(value: object) -> str | None:
    return branch_prefix_problem(value, "train/")


def check_sweep_branch_prefix(value: object, train_prefix: object = None) -> str | None:
    """The train prefix's rules, and apart from it: a branch matching both `<train>**` and `<sweep>**` would
    start train.yml and sweep.yml on one push, and the launch role's caller check could not tell the two apart.
    Two prefixes overlap exactly when one starts with the other (both end with '/')."""
    if (problem := branch_prefix_problem(value, "sweep/")) is not None or not isinstance(value, str):
        return problem
    if (
        isinstance(train_prefix, str)
        and train_prefix
        and (value.startswith(train_prefix) or train_prefix.startswith(value))
    ):
        return (
            f"it overlaps train_branch_prefix '{train_prefix}' (one starts with the other): a push to such a "
            "branch would start both a training and a sweep; use a prefix of its own (e.g. 'sweep/')"
        )
    return None


def branch_prefix_problem(value: object, example: str) -> str | None:
    """A prefix pasted into `on.push.branches` and the OIDC trust (`refs/heads/<prefix>*`)."""
    if not isinstance(value, str) or not value:
        return f"give a branch prefix such as '{example}'"
    if "$" in value:
        return "remove '$': the prefix is pasted into the workflow trigger and must not be an expression"
    if bad := sorted({char for char in value if not BRANCH_CHARS.fullmatch(char)}):
        shown = " ".join(repr(char) for char in bad)
        return f"remove {shown}; use only letters, digits, '.', '_', '-' and '/'"
    if value.startswith(("/", "-")):
        return f"it must not start with '/' or '-' (e.g. '{example}')"
    if not value.endswith("/"):
        return f"end it with '/' (e.g. '{value}/') so that branches look like '{value}/my-run'"
    if ".." in value or "//" in value:
        return "'..' and '//' are not allowed in git branch names"
    components = value.rstrip("/").split("/")
    if any(part.startswith(".") or part.endswith(".lock") for part in components):
        return "a part between slashes must not start with '.' or end with '.lock' (git branch rules)"
    return None


def check_default_branch(
    value: object, train_prefix: object = None, sweep_prefix: object = None
) -> str | None:
    """A branch name `git check-ref-format --branch` accepts (git-scm.com/docs/git-check-ref-format, read
    2026-12-01), from a narrower set of characters: it is pasted unquoted into train.yml's
    `uses: ...@<branch>`, the Makefile's bootstrap line and the OIDC trust (`refs/heads/<branch>`), where '#',
    quotes or '$' would break them."""
    if not isinstance(value, str) or not value:
        return "give the repository's default branch, e.g. 'main' or 'master'"
    if bad := sorted({char for char in value if not BRANCH_CHARS.fullmatch(char)}):
        shown = " ".join(repr(char) for char in bad)
        return f"remove {shown}; use only letters, digits, '.', '_', '-' and '/' (e.g. 'main')"
    if value.startswith("refs/"):
        return f"give the branch name without 'refs/heads/' (e.g. '{value.rsplit('/', 1)[-1]}')"
    if value.startswith(("/", "-")) or value.endswith(("/", ".")):
        return "it must not start with '/' or '-' nor end with '/' or '.' (git branch rules)"
    if ".." in value or "//" in value:
        return "'..' and '//' are not allowed in git branch names"
    if any(part.startswith(".") or part.endswith(".lock") for part in value.split("/")):
        return "a part between slashes must not start with '.' or end with '.lock' (git branch rules)"
    if value == "HEAD":
        return "'HEAD' is not a branch name; give the default branch, e.g. 'main'"
    if isinstance(train_prefix, str) and train_prefix and value.startswith(train_prefix):
        return (
            f"it starts with train_branch_prefix '{train_prefix}': every push to the default branch would "
            "start a GPU training; use a branch outside the prefix (e.g. 'main') or change train_branch_prefix"
        )
    if isinstance(sweep_prefix, str) and sweep_prefix and value.startswith(sweep_prefix):
        return (
            f"it starts with sweep_branch_prefix '{sweep_prefix}': every push to the default branch would "
            "start a GPU sweep; use a branch outside the prefix (e.g. 'main') or change sweep_branch_prefix"
        )
    return None


def check_max_runtime_minutes(value: object) -> str | None:
    minutes = whole_number(value)
    low, high = MAX_RUNTIME_RANGE
    if minutes is None or not low <= minutes <= high:
        return (
            f"use a whole number of minutes from {low} to {high} (48 hours); the train job times out "
            "15 minutes before the instance's max lifetime"
        )
    return None


def check_idle_timeout_minutes(value: object, max_runtime: object) -> str | None:
    minutes = whole_number(value)
    if minutes is None or minutes < 1:
        return "use a whole number of minutes, at least 1"
    limit = whole_number(max_runtime)
    if limit is not None and minutes >= limit:
        return f"it must be shorter than max_runtime_minutes ({limit}); e.g. 15"
    return None


def check_s3_bucket(value: object) -> str | None:
    if not isinstance(value, str) or not 3 <= len(value) <= 63:
        return "an S3 bucket name has 3-63 characters"
    if not BUCKET_CHARS.fullmatch(value):
        return "use only lowercase letters, digits, '.' and '-'"
    if not (value[0].isalnum() and value[-1].isalnum()):
        return "it must begin and end with a letter or digit"
    if ".." in value:
        return "remove '..' (two adjacent dots)"
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        pass
    else:
        return "it must not look like an IP address"
    if value.startswith(BUCKET_PREFIXES):
        return f"it must not start with any of {', '.join(BUCKET_PREFIXES)} (reserved by AWS)"
    if value.endswith(BUCKET_SUFFIXES):
        return f"it must not end with any of {', '.join(BUCKET_SUFFIXES)} (reserved by AWS)"
    return None


def check_license(value: object) -> str | None:
    if value not in LICENSES:
        return f"choose one of {', '.join(LICENSES)}"
    return None


def validators(answers: dict[str, object]) -> dict[str, Callable[[object], str | None]]:
    """One rule per question, in the order of cookiecutter.json."""
    return {
        "project_name": check_project_name,
        "description": check_description,
        "author_name": check_author_name,
        "github_owner": check_github_owner,
        "aws_region": check_aws_region,
        "gpu_instance_types": lambda value: check_gpu_instance_types(
            value, answers.get("aws_region"), offerings_table(answers.get("_repo_dir"))
        ),
        "use_spot": check_use_spot,
        "gpu_backend": check_gpu_backend,
        "train_branch_prefix": check_train_branch_prefix,
        "sweep_branch_prefix": lambda value: check_sweep_branch_prefix(
            value, answers.get("train_branch_prefix")
        ),
        "default_branch": lambda value: check_default_branch(
            value, answers.get("train_branch_prefix"), answers.get("sweep_branch_prefix")
        ),
        "max_runtime_minutes": check_max_runtime_minutes,
        "idle_timeout_minutes": lambda value: check_idle_timeout_minutes(
            value, answers.get("max_runtime_minutes")
        ),
        "mlflow_experiment_name": check_mlflow_experiment_name,
        "project_slug": check_project_slug,
        "package_name": check_package_name,
        "github_repo": check_github_repo,
        "s3_bucket": check_s3_bucket,
        "platform_repository": check_platform_repository,
        "license": check_license,
    }


def shown(value: object) -> str:
    """The answer as typed, on one line: control characters escaped, non-text values as JSON."""
    if not isinstance(value, str):
        return json.dumps(value)
    return "".join(escaped(char) if is_control(char) else char for char in value)


def findings(answers: dict[str, object]) -> list[tuple[str, str]]:
    """(field, error line) for every bad answer, in question order (empty when all answers are valid)."""
    found = []
    for field, check in validators(answers).items():
        value = answers.get(field)
        if (fix := check(value)) is not None:
            found.append((field, f"ERROR: {field} '{shown(value)}' is invalid: {fix}"))
    return found


def problems(answers: dict[str, object]) -> list[str]:
    """Every error line for `answers` (empty when all answers are valid)."""
    return [line for _, line in findings(answers)]


# Jinja's opening delimiters and its raw block: cookiecutter renders every `key=value` of its command line as a
# template. Spelt in two pieces because cookiecutter renders this file with Jinja too.
JINJA_DELIMITERS = ("{" + "{", "{" + "%", "{" + "#")
RAW_BLOCK = ("{" + "% raw %" + "}", "{" + "% endraw %" + "}")


def command_line_value(value: object) -> str:
    """`value` as cookiecutter's `key=value` argument gives it back: yes/no for booleans, and text holding Jinja
    syntax wrapped in a raw block, so that the command line's rendering returns it unchanged. Control characters
    are left out: no answer may hold one, and printed raw they would break the line (or drive the terminal)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = value if isinstance(value, str) else json.dumps(value)
    text = "".join(char for char in text if not is_control(char))
    if any(delimiter in text for delimiter in JINJA_DELIMITERS):
        return RAW_BLOCK[0] + text + RAW_BLOCK[1]
    return text


def bake_again_command(answers: dict[str, object], bad_fields: list[str]) -> str:
    """The `cookiecutter --no-input` command that bakes this template again with every public answer as given,
    the bad ones last (so they are easy to find and edit), each argument quoted for a POSIX shell."""
    command = ["cookiecutter", str(answers.get("_template", ""))]
    if answers.get("_checkout"):
        command += ["--checkout", str(answers["_checkout"])]
    output_dir = answers.get("_output_dir")
    # The hook runs inside the new project's directory; the shell that started cookiecutter set PWD.
    if isinstance(output_dir, str) and output_dir and output_dir != os.environ.get("PWD"):
        command += ["--output-dir", output_dir]
    command.append("--no-input")
    # In question order (the answers arrive with sorted keys: `tojson` sorts them).
    questions = list(validators(answers))
    public = [key for key in questions if key in answers]
    public += [key for key in answers if not key.startswith("_") and key not in questions]
    ordered = [key for key in public if key not in bad_fields] + [key for key in public if key in bad_fields]
    command += [f"{key}={command_line_value(answers[key])}" for key in ordered]
    return shlex.join(command)


def main() -> int:
    sys.stderr.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    found = findings(ANSWERS)
    for _, line in found:
        print(line, file=sys.stderr)
    if not found:
        return 0
    fields = [field for field, _ in found]
    print(
        f"Nothing was written. To bake again with all your answers, correct {' and '.join(fields)} at the end of "
        "this command and run it:",
        file=sys.stderr,
    )
    print(f"  {bake_again_command(ANSWERS, fields)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
