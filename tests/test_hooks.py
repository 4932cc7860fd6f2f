"""The hooks, exercised through the real cookiecutter CLI.

Every rejection rule of hooks/pre_gen_project.py has one case below: the run must fail, print exactly
`ERROR: <field> '<value>' is invalid: <how to fix>` on stderr and leave no project behind. Values that
contain Jinja syntax, or that are not strings, go through a replay file (the command line renders
`key=value` with Jinja and converts booleans itself).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import (
    ANSWERS_FILE,
    PLATFORM_REPOSITORY,
    TEMPLATE_ROOT,
    bake_template,
    cli_no_input,
    cli_replay,
    default_answers,
    iter_strings,
    load_hook,
    parse_structured,
    public,
    render_hook,
    structured_files,
    template_config,
    text_files,
)

ERROR_LINE = re.compile(r"^ERROR: (?P<field>[a-z_]+) '(?P<value>.*)' is invalid: (?P<fix>.+)$")


@dataclass(frozen=True)
class Rejection:
    """One rejection rule: `field` answered with `value` must fail with a message showing `shown`.

    `mentions`: text the "how to fix" part must contain; `others`: answers that keep cookiecutter itself
    going (e.g. a slug when the name is empty); `replay`: deliver the answers verbatim via a replay file.
    """

    field: str
    value: Any
    shown: str
    mentions: str
    others: dict[str, str]
    replay: bool

    def run(self, workdir: Path) -> subprocess.CompletedProcess[str]:
        if self.replay:
            return cli_replay(workdir, default_answers(**self.others) | {self.field: self.value})
        return cli_no_input(workdir, **self.others, **{self.field: self.value})


def reject(
    case_id: str,
    field: str,
    value: Any,
    *,
    replay: bool = False,
    shown: str | None = None,
    mentions: str = "",
    **others: str,
) -> tuple[str, Rejection]:
    if shown is None:
        shown = value if isinstance(value, str) else json.dumps(value)
    return f"{field}-{case_id}", Rejection(field, value, shown, mentions, others, replay)


REJECTION_CASES = [
    # project_name (the slug is given, otherwise an empty name gives cookiecutter an empty directory name)
    reject("empty", "project_name", "", project_slug="ok-project"),
    reject("blank", "project_name", "   ", project_slug="ok-project"),
    reject("control-char", "project_name", "ML\tProject", shown="ML\\tProject", mentions="\\t"),
    reject("too-long", "project_name", "n" * 201, mentions="200"),
    # description
    reject("empty", "description", ""),
    reject("newline", "description", "line one\nline two", shown="line one\\nline two", mentions="\\n"),
    reject("too-long", "description", "d" * 301, mentions="300"),
    # author_name
    reject("empty", "author_name", ""),
    reject("control-char", "author_name", "Ann\x07", shown="Ann\\x07"),
    reject("too-long", "author_name", "a" * 201, mentions="200"),
    # github_owner
    reject("empty", "github_owner", ""),
    reject("leading-hyphen", "github_owner", "-org"),
    reject("trailing-hyphen", "github_owner", "org-"),
    reject("double-hyphen", "github_owner", "my--org"),
    reject("underscore", "github_owner", "my_org"),
    reject("too-long", "github_owner", "o" * 40),
    # github_repo
    reject("empty", "github_repo", ""),
    reject("dot", "github_repo", "."),
    reject("dotdot", "github_repo", ".."),
    reject("space", "github_repo", "my repo"),
    reject("too-long", "github_repo", "r" * 101),
    reject("git-suffix", "github_repo", "repo.git"),
    # aws_region
    reject("no-number", "aws_region", "eu-west"),
    reject("uppercase", "aws_region", "EU-WEST-1"),
    reject("unknown-prefix", "aws_region", "mars-east-1"),
    reject("two-digits", "aws_region", "eu-west-12"),
    # gpu_instance_types: the message names the bad entry
    reject("empty", "gpu_instance_types", ""),
    reject("empty-entry", "gpu_instance_types", "g4dn.xlarge,,g5.xlarge", mentions="entry 2"),
    reject("trailing-comma", "gpu_instance_types", "g4dn.xlarge,", mentions="entry 2"),
    # Spaces around the commas are dropped (test_spaces_around_commas_are_dropped); inside an entry they stay.
    reject("space-inside", "gpu_instance_types", "g4dn.xlarge, g5 .xlarge", mentions="entry 2 'g5 .xlarge'"),
    reject("no-size", "gpu_instance_types", "g5.xlarge,g4dn", mentions="'g4dn'"),
    reject("uppercase", "gpu_instance_types", "G4DN.xlarge", mentions="'G4DN.xlarge'"),
    reject("digit-family", "gpu_instance_types", "4g.xlarge", mentions="'4g.xlarge'"),
    reject("duplicate", "gpu_instance_types", "g5.xlarge,g6.xlarge,g5.xlarge", mentions="entry 3 'g5"),
    reject("no-gpu", "gpu_instance_types", "c5.xlarge,m5.large", mentions="GPU"),
    # Checked against the bundled offerings table (AWS's DescribeInstanceTypeOfferings) for that region.
    reject(
        "not-offered-in-region",
        "gpu_instance_types",
        "g4dn.xlarge,g6.xlarge",
        mentions="entry 2 'g6.xlarge' is not offered in eu-west-1",
    ),
    reject(
        "region-without-gpus",
        "gpu_instance_types",
        "g4dn.xlarge",
        mentions="ap-southeast-4 offers no GPU",
        aws_region="ap-southeast-4",
    ),
    # The default AMI does not support P3 (its release notes' supported instance list).
    reject(
        "p3-not-supported-by-the-ami", "gpu_instance_types", "p3.2xlarge", mentions="does not support the p3"
    ),
    # use_spot: only a replay file can deliver a non-boolean (the CLI converts yes/no itself)
    reject("string", "use_spot", "false", replay=True),
    reject("number", "use_spot", 0, replay=True),
    # train_branch_prefix: pasted into `on.push.branches`
    reject("empty", "train_branch_prefix", ""),
    reject("no-trailing-slash", "train_branch_prefix", "train", mentions="'train/'"),
    reject("space", "train_branch_prefix", "my train/"),
    reject("tilde", "train_branch_prefix", "train~1/"),
    reject("colon", "train_branch_prefix", "train:x/"),
    reject("glob", "train_branch_prefix", "train*/"),
    reject("backslash", "train_branch_prefix", "train\\x/"),
    reject("dotdot", "train_branch_prefix", "train../"),
    reject("at-brace", "train_branch_prefix", "train@{1}/"),
    reject("double-slash", "train_branch_prefix", "train//"),
    reject("leading-slash", "train_branch_prefix", "/train/"),
    reject("leading-dash", "train_branch_prefix", "-train/"),
    reject("dot-component", "train_branch_prefix", "train/.x/"),
    reject("lock-component", "train_branch_prefix", "train.lock/"),
    reject("expression", "train_branch_prefix", "train-${{ github.actor }}/", replay=True),
    reject("dollar", "train_branch_prefix", "train$HOME/"),
    reject("backtick", "train_branch_prefix", "train`id`/"),
    reject("single-quote", "train_branch_prefix", "train'x/"),
    reject("double-quote", "train_branch_prefix", 'train"x/'),
    # sweep_branch_prefix: the same rules (pasted into sweep.yml's `on.push.branches` and the OIDC trust)
    reject("empty", "sweep_branch_prefix", "", mentions="'sweep/'"),
    reject("no-trailing-slash", "sweep_branch_prefix", "sweep", mentions="'sweep/'"),
    reject("space", "sweep_branch_prefix", "my sweep/"),
    reject("tilde", "sweep_branch_prefix", "sweep~1/"),
    reject("colon", "sweep_branch_prefix", "sweep:x/"),
    reject("glob", "sweep_branch_prefix", "sweep*/"),
    reject("backslash", "sweep_branch_prefix", "sweep\\x/"),
    reject("dotdot", "sweep_branch_prefix", "sweep../"),
    reject("double-slash", "sweep_branch_prefix", "sweep//"),
    reject("leading-slash", "sweep_branch_prefix", "/sweep/", mentions="'sweep/'"),
    reject("leading-dash", "sweep_branch_prefix", "-sweep/"),
    reject("dot-component", "sweep_branch_prefix", "sweep/.x/"),
    reject("lock-component", "sweep_branch_prefix", "sweep.lock/"),
    reject("expression", "sweep_branch_prefix", "sweep-${{ github.actor }}/", replay=True),
    reject("dollar", "sweep_branch_prefix", "sweep$HOME/"),
    reject("backtick", "sweep_branch_prefix", "sweep`id`/"),
    reject("single-quote", "sweep_branch_prefix", "sweep'x/"),
    reject("double-quote", "sweep_branch_prefix", 'sweep"x/'),
    # A branch under both prefixes would start train.yml and sweep.yml on one push.
    reject(
        "equal-to-train-prefix",
        "sweep_branch_prefix",
        "train/",
        mentions="overlaps train_branch_prefix 'train/'",
    ),
    reject("under-train-prefix", "sweep_branch_prefix", "train/sweep/", mentions="one starts with the other"),
    reject(
        "containing-train-prefix",
        "sweep_branch_prefix",
        "gpu/",
        mentions="overlaps train_branch_prefix 'gpu/train/'",
        train_branch_prefix="gpu/train/",
    ),
    # default_branch: pasted into train.yml's `uses: ...@<branch>`, the checkouts and the OIDC trust
    reject("empty", "default_branch", ""),
    reject("space", "default_branch", "my main", mentions="' '"),
    reject("tilde", "default_branch", "main~1"),
    reject("caret", "default_branch", "main^"),
    reject("colon", "default_branch", "a:b"),
    reject("glob", "default_branch", "ma*n"),
    reject("bracket", "default_branch", "ma[i]n"),
    reject("question-mark", "default_branch", "mai?"),
    reject("backslash", "default_branch", "a\\b"),
    reject("hash", "default_branch", "main#x", mentions="'#'"),
    reject("at-brace", "default_branch", "main@{1}"),
    reject("dotdot", "default_branch", "a..b", mentions="'..'"),
    reject("double-slash", "default_branch", "a//b"),
    reject("leading-dash", "default_branch", "-main"),
    reject("leading-slash", "default_branch", "/main"),
    reject("trailing-slash", "default_branch", "main/"),
    reject("trailing-dot", "default_branch", "main."),
    reject("lock", "default_branch", "main.lock", mentions=".lock"),
    reject("dot-component", "default_branch", "a/.b"),
    reject("full-ref", "default_branch", "refs/heads/main", mentions="'main'"),
    reject("head", "default_branch", "HEAD"),
    reject("expression", "default_branch", "${{ github.actor }}", replay=True),
    # A default branch under the train prefix would make every push to it a GPU training.
    reject("under-train-prefix", "default_branch", "train/main", mentions="would start a GPU training"),
    reject(
        "under-custom-prefix",
        "default_branch",
        "gpu/main",
        mentions="train_branch_prefix 'gpu/'",
        train_branch_prefix="gpu/",
    ),
    # ... and one under the sweep prefix a GPU sweep.
    reject("under-sweep-prefix", "default_branch", "sweep/main", mentions="would start a GPU sweep"),
    reject(
        "under-custom-sweep-prefix",
        "default_branch",
        "hpo/main",
        mentions="sweep_branch_prefix 'hpo/'",
        sweep_branch_prefix="hpo/",
    ),
    # max_runtime_minutes
    reject("word", "max_runtime_minutes", "three hours"),
    reject("negative", "max_runtime_minutes", "-5"),
    reject("decimal", "max_runtime_minutes", "12.5"),
    reject("below-20", "max_runtime_minutes", "19", idle_timeout_minutes="5"),
    reject("above-2880", "max_runtime_minutes", "2881"),
    reject("boolean", "max_runtime_minutes", True, replay=True),
    # idle_timeout_minutes
    reject("zero", "idle_timeout_minutes", "0"),
    reject("word", "idle_timeout_minutes", "soon"),
    reject("equal-to-max", "idle_timeout_minutes", "180", max_runtime_minutes="180", mentions="180"),
    reject("above-max", "idle_timeout_minutes", "200", max_runtime_minutes="180"),
    reject("float", "idle_timeout_minutes", 1.5, replay=True),
    # mlflow_experiment_name
    reject("empty", "mlflow_experiment_name", ""),
    reject("too-long", "mlflow_experiment_name", "e" * 201, mentions="200"),
    reject("control-char", "mlflow_experiment_name", "exp\x1b[31m", shown="exp\\x1b[31m"),
    # s3_bucket
    reject("too-short", "s3_bucket", "ab"),
    reject("too-long", "s3_bucket", "b" * 64),
    reject("uppercase", "s3_bucket", "My-Bucket"),
    reject("underscore", "s3_bucket", "my_bucket"),
    reject("leading-hyphen", "s3_bucket", "-bucket"),
    reject("trailing-dot", "s3_bucket", "bucket."),
    reject("dotdot", "s3_bucket", "my..bucket"),
    reject("ip-address", "s3_bucket", "192.168.5.4"),
    reject("xn-prefix", "s3_bucket", "xn--bucket"),
    reject("sthree-prefix", "s3_bucket", "sthree-bucket"),
    reject("demo-prefix", "s3_bucket", "amzn-s3-demo-bucket"),
    reject("s3alias-suffix", "s3_bucket", "bucket-s3alias"),
    reject("ol-s3-suffix", "s3_bucket", "bucket--ol-s3"),
    reject("mrap-suffix", "s3_bucket", "bucket.mrap"),
    reject("x-s3-suffix", "s3_bucket", "bucket--x-s3"),
    reject("table-s3-suffix", "s3_bucket", "bucket--table-s3"),
    # project_slug (it is also the distribution name)
    reject("uppercase", "project_slug", "My-Project"),
    reject("underscore", "project_slug", "my_project"),
    reject("space", "project_slug", "my project"),
    reject("leading-digit", "project_slug", "1project"),
    reject("double-dash", "project_slug", "my--project"),
    reject("trailing-dash", "project_slug", "project-"),
    reject("too-long", "project_slug", "s" * 51, mentions="50"),
    # package_name
    reject("dash", "package_name", "my-package"),
    reject("uppercase", "package_name", "MyPackage"),
    reject("leading-digit", "package_name", "1package"),
    reject("too-long", "package_name", "a" * 41, mentions="at most 40"),
    reject("keyword", "package_name", "class", mentions="keyword"),
    reject("stdlib", "package_name", "json", mentions="shadow"),
    reject("dependency", "package_name", "tensorflow", mentions="shadow"),
    reject("tests-dir", "package_name", "tests", mentions="shadow"),
    # license (the CLI refuses unknown choices itself; a replay file does not)
    reject("unknown", "license", "GPL-3.0", replay=True, mentions="MIT"),
    # gpu_backend (the same: a hand-written replay file may say anything)
    reject("unknown", "gpu_backend", "kubernetes", replay=True, mentions="runner, batch"),
]
REJECTIONS = dict(REJECTION_CASES)


BAKE_AGAIN_PREFIX = "  cookiecutter "


def bake_again_line(stderr: str) -> str:
    """The command the hook prints after its errors (one line, indented by two spaces)."""
    (line,) = [line for line in stderr.splitlines() if line.startswith(BAKE_AGAIN_PREFIX)]
    return line.strip()


def error_lines(stderr: str) -> list[re.Match[str]]:
    return [match for line in stderr.splitlines() if (match := ERROR_LINE.match(line))]


def out_entries(workdir: Path) -> list[str]:
    return sorted(path.name for path in (workdir / "out").iterdir())


@pytest.fixture(scope="module")
def rejection_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[tuple[subprocess.CompletedProcess[str], Path]]]]:
    """Start the CLI for every selected rejection case at once (each is a ~0.6 s process, mostly imports).

    Each test still asserts on its own real CLI run; this only overlaps the runs on the available cores.
    """
    selected = [
        item.callspec.params["case_id"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_rejected" and hasattr(item, "callspec")
    ]

    # mktemp is not thread-safe: make every directory here, before the threads start.
    workdirs = {case_id: tmp_path_factory.mktemp(case_id) for case_id in selected}

    def run(case_id: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        return REJECTIONS[case_id].run(workdirs[case_id]), workdirs[case_id]

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        yield {case_id: pool.submit(run, case_id) for case_id in selected}


@pytest.mark.parametrize("case_id", list(REJECTIONS))
def test_rejected(
    case_id: str, rejection_runs: dict[str, Future[tuple[subprocess.CompletedProcess[str], Path]]]
) -> None:
    case = REJECTIONS[case_id]
    proc, workdir = rejection_runs[case_id].result()

    assert proc.returncode != 0, proc.stdout + proc.stderr
    prefix = f"ERROR: {case.field} '{case.shown}' is invalid: "
    lines = [line for line in proc.stderr.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, f"no line starting {prefix!r} in stderr:\n{proc.stderr}"
    fix = lines[0].removeprefix(prefix)
    assert fix.strip(), "the message must say how to fix the answer"
    assert case.mentions in fix
    assert out_entries(workdir) == [], "a rejected answer must not leave a project directory"
    assert f"correct {case.field}" in proc.stderr
    assert any(arg.startswith(f"{case.field}=") for arg in shlex.split(bake_again_line(proc.stderr)))


def test_rejection_case_ids_are_unique() -> None:
    assert len(REJECTIONS) == len(REJECTION_CASES)


def test_every_bad_field_is_reported_once(tmp_path: Path) -> None:
    bad = {
        "project_slug": "Bad Slug",
        "package_name": "class",
        "aws_region": "moon-1",
        "gpu_instance_types": "c5.xlarge",
        "max_runtime_minutes": "5",
    }
    # Derived answers given explicitly so that only the five above are wrong.
    fine = {"github_repo": "ok-repo", "s3_bucket": "ok-bucket", "idle_timeout_minutes": "1"}
    proc = cli_no_input(tmp_path, **fine, **bad)

    assert proc.returncode != 0
    reported = {match["field"]: match["value"] for match in error_lines(proc.stderr)}
    assert reported == bad
    assert len(error_lines(proc.stderr)) == len(bad)
    assert out_entries(tmp_path) == []


# ------------------------------------------------------------------------------ baking as a person does it
def test_spaces_around_commas_are_dropped(tmp_path: Path) -> None:
    """`g5.xlarge, g4dn.xlarge` as typed at the prompt: accepted, and the canonical list wherever it lands."""
    typed = " g5.xlarge ,  g4dn.xlarge\t"
    proc = cli_no_input(tmp_path, gpu_instance_types=typed)

    assert proc.returncode == 0, proc.stderr
    project = tmp_path / "out" / "ml-project"
    config = yaml.safe_load((project / "configs" / "gpu-runner.yaml").read_text(encoding="utf-8"))
    assert config["instance_types"] == ["g5.xlarge", "g4dn.xlarge"]
    recorded = json.loads((project / ANSWERS_FILE).read_text(encoding="utf-8"))["cookiecutter"]
    assert recorded["gpu_instance_types"] == "g5.xlarge,g4dn.xlarge"
    assert [str(path) for path, text in text_files(project).items() if typed.strip() in text] == []


@pytest.mark.parametrize("apostrophe", ["'", "\u2019"], ids=["ascii", "typographic"])
def test_apostrophes_are_dropped_before_slugifying(apostrophe: str) -> None:
    answers = default_answers(project_name=f"Zoë{apostrophe}s Vision Lab")

    assert answers["project_slug"] == "zoes-vision-lab"
    assert answers["package_name"] == "zoes_vision_lab"
    assert answers["github_repo"] == "zoes-vision-lab"
    assert answers["s3_bucket"] == "your-org-zoes-vision-lab-ml"


# One interactive session: the answer to every prompt in cookiecutter.json's order (an empty line takes the
# default). Free text that a shell or Jinja would change, and one bad answer (gpu_instance_types).
TYPED = {
    "project_name": "Zoë's Vision Lab",
    "description": 'Ann\'s "lab": $(touch pwned) `id` {{ 7*7 }} {% raw %} #c',
    "author_name": "O'Brien & Co; rm -rf x",
    "gpu_instance_types": "g4dn.xlarge,,g5.xlarge",
    "use_spot": "n",
    "max_runtime_minutes": "240",
    "platform_repository": PLATFORM_REPOSITORY,
    "license": "2",
}
CORRECTED = ("gpu_instance_types", "g4dn.xlarge, g5.xlarge")


def bake_interactively(workdir: Path, typed: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`cookiecutter <template>` on a terminal-less stdin, answering the prompts in order; HOME is `workdir`,
    so cookiecutter's replay file and user config stay there."""
    questions = [key for key in template_config() if not key.startswith("_")]
    stdin = "".join(f"{typed.get(key, '')}\n" for key in questions)
    env = {**os.environ, "HOME": str(workdir), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "cookiecutter", str(bake_template()), "--output-dir", str(workdir / "out")],
        cwd=workdir, env=env, input=stdin, capture_output=True, text=True, encoding="utf-8", timeout=120,
        check=False,
    )  # fmt: skip


def test_a_rejected_bake_prints_the_command_that_keeps_every_answer(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    first = bake_interactively(tmp_path, TYPED)
    assert first.returncode != 0
    assert "ERROR: gpu_instance_types 'g4dn.xlarge,,g5.xlarge' is invalid: entry 2 is empty" in first.stderr
    assert out_entries(tmp_path) == []
    printed = bake_again_line(first.stderr)
    assert "correct gpu_instance_types at the end of this command" in first.stderr
    # What cookiecutter itself recorded of the session (its replay file): every answer, the bad one included.
    (replay,) = (tmp_path / ".cookiecutter_replay").glob("*.json")
    given = public(json.loads(replay.read_text(encoding="utf-8"))["cookiecutter"])
    assert given["project_slug"] == "zoes-vision-lab" and given["license"] == "Apache-2.0"

    field, fixed = CORRECTED
    bad = shlex.quote(f"{field}={given[field]}")
    assert printed.endswith(bad), "the bad answer comes last, where it is easy to edit"
    command = printed.removesuffix(bad) + shlex.quote(f"{field}={fixed}")
    env = {**os.environ, "HOME": str(tmp_path), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    second = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, encoding="utf-8",
        timeout=120, check=False,
    )  # fmt: skip

    assert second.returncode == 0, second.stderr
    assert not list(tmp_path.rglob("pwned"))
    recorded = json.loads((tmp_path / "out" / "zoes-vision-lab" / ANSWERS_FILE).read_text(encoding="utf-8"))
    assert recorded["cookiecutter"] == given | {field: "g4dn.xlarge,g5.xlarge"}


def test_the_command_carries_every_kind_of_answer() -> None:
    """The command-line form of each answer type: cookiecutter renders `key=value` with Jinja and converts
    yes/no for booleans, so text holding Jinja syntax goes in a raw block and booleans as yes/no."""
    hook = load_hook("pre_gen_project", default_answers())
    value = hook["command_line_value"]

    assert value(True) == "yes" and value(False) == "no"
    assert value(180) == "180"
    assert value("{{ 7*7 }}") == "{% raw %}{{ 7*7 }}{% endraw %}"
    assert value("plain text") == "plain text"
    assert value("line one\nline two\x1b[31m") == "line oneline two[31m"  # the command stays one line


def test_cli_booleans_are_converted_by_cookiecutter(tmp_path: Path) -> None:
    proc = cli_no_input(tmp_path, use_spot="no")

    assert proc.returncode == 0, proc.stderr
    answers = json.loads((tmp_path / "out" / "ml-project" / ANSWERS_FILE).read_text(encoding="utf-8"))
    assert answers["cookiecutter"]["use_spot"] is False


def test_cli_refuses_a_non_boolean_before_the_hook(tmp_path: Path) -> None:
    proc = cli_no_input(tmp_path, use_spot="maybe")

    assert proc.returncode != 0
    assert "could not be converted to a boolean" in proc.stdout + proc.stderr
    assert out_entries(tmp_path) == []


VALID_EDGE_CASES = [
    pytest.param({"aws_region": "us-gov-west-1"}, id="govcloud-region"),
    pytest.param({"aws_region": "ca-central-1"}, id="region-ca-central-1"),
    pytest.param({"gpu_instance_types": "p4d.24xlarge"}, id="single-instance-type"),
    pytest.param(
        {"aws_region": "us-east-1", "gpu_instance_types": "g6e.2xlarge,p5.48xlarge,c5.xlarge"},
        id="gpu-then-cpu-types",
    ),
    pytest.param({"s3_bucket": "data.ml-project.example"}, id="bucket-with-dots"),
    pytest.param({"s3_bucket": "abc"}, id="bucket-3-chars"),
    pytest.param({"github_owner": "o" * 39, "github_repo": "My.Repo_x-1"}, id="owner-39-repo-dots"),
    pytest.param({"train_branch_prefix": "gpu/train-v1.2/"}, id="nested-branch-prefix"),
    pytest.param({"sweep_branch_prefix": "gpu/hpo-v1.2/"}, id="nested-sweep-prefix"),
    # Siblings under one parent do not overlap: gpu/train/** and gpu/sweep/** match no branch in common.
    pytest.param(
        {"train_branch_prefix": "gpu/train/", "sweep_branch_prefix": "gpu/sweep/"}, id="sibling-prefixes"
    ),
    # 'trainer/' does not start with 'train/' (the slash is part of the prefix).
    pytest.param({"sweep_branch_prefix": "trainer/"}, id="sweep-prefix-sharing-letters-with-train"),
    pytest.param({"default_branch": "master"}, id="default-branch-master"),
    pytest.param({"default_branch": "release/v2.x_1-a"}, id="default-branch-nested"),
    # 'train' is not under the prefix 'train/' (pushes to it match no `train/**`).
    pytest.param({"default_branch": "train"}, id="default-branch-named-like-the-prefix"),
    pytest.param({"max_runtime_minutes": "20", "idle_timeout_minutes": "1"}, id="runtime-minimum"),
    pytest.param({"max_runtime_minutes": "2880", "idle_timeout_minutes": "2879"}, id="runtime-maximum"),
    # The longest slug; its derived package name (50 characters) would exceed the 40-character limit.
    pytest.param({"project_slug": "s" * 50, "package_name": "s" * 40}, id="slug-50-chars"),
    pytest.param({"package_name": "_ml_project_2"}, id="package-underscores"),
    pytest.param({"description": "d" * 300, "mlflow_experiment_name": "e" * 200}, id="max-length-text"),
]


@pytest.mark.parametrize("answers", VALID_EDGE_CASES)
def test_valid_edge_case(tmp_path: Path, answers: dict[str, str]) -> None:
    proc = cli_no_input(tmp_path, **answers)

    assert proc.returncode == 0, proc.stderr
    assert error_lines(proc.stderr) == []
    (project,) = (tmp_path / "out").iterdir()
    recorded = json.loads((project / ANSWERS_FILE).read_text(encoding="utf-8"))["cookiecutter"]
    assert {key: recorded[key] for key in answers} == answers


def test_hook_rejects_names_that_shadow_imports() -> None:
    check = load_hook("pre_gen_project", default_answers())["check_package_name"]
    required = ("tensorflow", "mlflow", "keras", "test", "tests", "src", "boto3", "json", "os", "sys")

    assert [name for name in required if check(name) is None] == []
    assert check("ml_project") is None
    assert check("match") is None, "soft keywords are valid module names"


def test_hook_license_choices_match_cookiecutter_json() -> None:
    licenses = load_hook("pre_gen_project", default_answers())["LICENSES"]

    assert list(licenses) == template_config()["license"]


def test_hook_backend_choices_match_cookiecutter_json_and_the_runner_settings() -> None:
    """The question's choices are exactly what configs/gpu-runner.yaml `backend` accepts (settings.BACKENDS),
    the default first: a baked project's settings load."""
    backends = load_hook("pre_gen_project", default_answers())["GPU_BACKENDS"]
    settings = OFFERINGS.with_name("settings.py").read_text(encoding="utf-8")
    declared = re.search(r"^BACKENDS = (\(.*\))$", settings, flags=re.MULTILINE)

    assert declared, "platform/src/gpu_runner/core/settings.py no longer declares BACKENDS = (...)"
    assert list(backends) == template_config()["gpu_backend"] == list(ast.literal_eval(declared[1]))
    assert backends[0] == "runner"


RUNNER_PACKAGE = TEMPLATE_ROOT / "platform" / "src" / "gpu_runner"
OFFERINGS = RUNNER_PACKAGE / "core" / "offerings.json"


def test_default_instance_types_are_offered_in_the_default_region() -> None:
    answers = default_answers()
    table = json.loads(OFFERINGS.read_text(encoding="utf-8"))
    check = load_hook("pre_gen_project", answers)["check_gpu_instance_types"]
    assert check(answers["gpu_instance_types"], answers["aws_region"], table) is None
    offered = table["regions"][answers["aws_region"]]
    assert [t for t in answers["gpu_instance_types"].split(",") if t not in offered] == []
    # The same rule with the table's own data refuses what AWS does not offer there (the control).
    assert check("g6.xlarge", "eu-west-1", table) is not None


def test_hook_finds_the_offerings_table_from_the_repo_dir() -> None:
    hook = load_hook("pre_gen_project", default_answers())
    assert hook["offerings_table"](str(TEMPLATE_ROOT)) == json.loads(OFFERINGS.read_text(encoding="utf-8"))
    assert hook["offerings_table"]("") is None


def test_hook_ami_families_match_the_runner_settings() -> None:
    settings = ast.parse((OFFERINGS.parent / "settings.py").read_text(encoding="utf-8"))
    (families,) = [
        ast.literal_eval(node.value)
        for node in settings.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DLAMI_GPU_FAMILIES"
    ]
    assert load_hook("pre_gen_project", default_answers())["DLAMI_GPU_FAMILIES"] == families


def test_default_answers_pass_validation() -> None:
    assert load_hook("pre_gen_project", default_answers())["problems"](default_answers()) == []


# ------------------------------------------------------------------------------------------------- injection
# Free text full of quotes, unicode, template syntax and shell metacharacters. Delivered by a replay file,
# because the command line renders `key=value` with Jinja (so `{{ 7*7 }}` would become 49 before any hook).
NASTY = (
    "Zoë's «Ünïcode» 数字 \"dq\" '''tq''' {{ 7*7 }} {% if x %} {# c #} "
    "$(touch pwned) `touch pwned` ; rm -rf x \\n \\ a: b #c"
)
FREE_TEXT = {
    "project_name": f"Name {NASTY}",
    "description": f"Desc {NASTY}",
    "author_name": f"Author {NASTY}",
    "mlflow_experiment_name": f"Exp {NASTY}",
}
INJECTION_IDENTIFIERS = {"project_slug": "inject-check", "package_name": "inject_check"}


@pytest.fixture(scope="module")
def injected(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    workdir = tmp_path_factory.mktemp("injection")
    answers = default_answers(**INJECTION_IDENTIFIERS) | FREE_TEXT
    return cli_replay(workdir, answers), workdir


@pytest.fixture(scope="module")
def injected_project(injected: tuple[subprocess.CompletedProcess[str], Path]) -> Path:
    proc, workdir = injected
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return workdir / "out" / INJECTION_IDENTIFIERS["project_slug"]


def test_injection_runs_nothing(injected: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, workdir = injected

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [*workdir.rglob("pwned"), *TEMPLATE_ROOT.glob("pwned"), *Path.cwd().glob("pwned")] == []


def test_injection_structured_files_parse(injected_project: Path) -> None:
    files = structured_files(injected_project)

    assert any(path.name == "pyproject.toml" for path in files)
    for path in files:
        parse_structured(path)


def test_injection_python_files_compile(injected_project: Path) -> None:
    sources = {path: text for path, text in text_files(injected_project).items() if path.suffix == ".py"}

    assert sources
    for path, text in sources.items():
        ast.parse(text, filename=str(path))


def test_injection_values_survive_exactly(injected_project: Path) -> None:
    project = tomllib.loads((injected_project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    recorded = json.loads((injected_project / ANSWERS_FILE).read_text(encoding="utf-8"))["cookiecutter"]

    assert project["description"] == FREE_TEXT["description"]
    assert project["authors"] == [{"name": FREE_TEXT["author_name"]}]
    assert {key: recorded[key] for key in FREE_TEXT} == FREE_TEXT
    assert FREE_TEXT["author_name"] in (injected_project / "LICENSE").read_text(encoding="utf-8")


def test_injection_values_are_whole_wherever_they_land(injected_project: Path) -> None:
    """Any YAML/TOML/JSON string or Python string constant that holds a free-text answer holds all of it.

    Catches values that were pasted raw: a YAML `#` comment truncating them, escapes being interpreted, etc.
    """
    marker = NASTY[:6]  # "Zoë's "
    landed: dict[str, list[str]] = {}
    for path in structured_files(injected_project):
        landed[str(path.relative_to(injected_project))] = list(iter_strings(parse_structured(path)))
    for path, text in text_files(injected_project).items():
        if path.suffix == ".py":
            tree = ast.parse(text)
            constants = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)]
            landed[str(path)] = [value for value in constants if isinstance(value, str)]

    partial = {
        name: value
        for name, values in landed.items()
        for value in values
        if marker in value and NASTY not in value
    }
    assert partial == {}
    assert any(NASTY in value for values in landed.values() for value in values)


def imported_top_level_names(init: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_injection_package_imports(injected_project: Path) -> None:
    package = INJECTION_IDENTIFIERS["package_name"]
    init = injected_project / "src" / package / "__init__.py"
    if not init.is_file():
        pytest.skip(f"src/{package}/__init__.py is not part of the template yet")
    if "tensorflow" in imported_top_level_names(init):
        pytest.skip("the package __init__ imports TensorFlow, which the template tooling does not install")

    env = {**os.environ, "PYTHONPATH": str(injected_project / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", f"import {package}"],
        cwd=injected_project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_injection_makefile_still_parses(injected_project: Path) -> None:
    proc = subprocess.run(
        ["make", "--dry-run", "help"], cwd=injected_project, capture_output=True, text=True, check=False
    )

    assert proc.returncode == 0, proc.stderr
    assert not list(injected_project.rglob("pwned"))


# ------------------------------------------------------------------------------------------------- post-gen
# The only processes post-gen may start: git reading the template's own checkout for .cruft.json.
# `cat-file -e <commit>:<path>`: whether the commit holds the path (exit status only).
READ_ONLY_GIT = {("rev-parse", "--verify"), ("rev-parse", "--show-toplevel"), ("rev-parse", "--show-prefix"),
                 ("status", "--porcelain"), ("remote", "get-url"), ("cat-file", "-e")}  # fmt: skip


def test_post_gen_hook_stays_offline() -> None:
    tree = ast.parse(render_hook("post_gen_project", default_answers()))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    named = [(call, call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", ""))
             for call in calls]  # fmt: skip
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}

    # urllib.parse only splits the template's URL (urllib.request would fetch).
    assert [name for name in imported if name.split(".")[0] in {"socket", "http", "requests"}] == []
    assert [name for name in imported if name.startswith("urllib") and name != "urllib.parse"] == []
    # subprocess runs once, in git_output, and that runs git; git_output only runs read-only local commands.
    spawned = [call for call, name in named if name in {"run", "Popen", "call", "check_output", "system"}]
    assert [ast.unparse(call.args[0]) for call in spawned] == ["['git', '-C', str(directory), *args]"]
    assert spawned[0] in list(ast.walk(functions["git_output"]))
    git_calls = [call for call, name in named if name == "git_output"]
    assert git_calls, "post-gen no longer reads the template's git checkout"
    assert {tuple(ast.literal_eval(arg) for arg in call.args[1:3]) for call in git_calls} <= READ_ONLY_GIT


@pytest.mark.parametrize(
    ("origin", "recorded"),
    [
        ("https://x-access-token:ghp_secret@github.com/org/tpl.git", "https://github.com/org/tpl.git"),
        ("https://ghp_secret@github.com/org/tpl.git", "https://github.com/org/tpl.git"),
        ("ssh://user:secret@example.com:2222/org/tpl.git", "ssh://example.com:2222/org/tpl.git"),
        ("https://github.com/org/tpl.git", "https://github.com/org/tpl.git"),
        ("ssh://git@github.com/org/tpl.git", "ssh://git@github.com/org/tpl.git"),
        ("git@github.com:org/tpl.git", "git@github.com:org/tpl.git"),
        ("file:///srv/templates/tpl", "file:///srv/templates/tpl"),
    ],
)
def test_post_gen_records_no_credential_of_the_template_url(origin: str, recorded: str) -> None:
    """.cruft.json is committed: a token in the URL a private template was cloned with must not reach it."""
    without_credentials = load_hook("post_gen_project", default_answers())["without_credentials"]

    assert without_credentials(origin) == recorded


def test_post_gen_prints_numbered_next_steps(tmp_path: Path) -> None:
    proc = cli_no_input(tmp_path, train_branch_prefix="gpu/")

    assert proc.returncode == 0, proc.stderr
    steps = re.findall(r"^\s+(\d+)\. (.+)$", proc.stdout, flags=re.MULTILINE)
    assert [int(number) for number, _ in steps] == list(range(1, len(steps) + 1))
    texts = [text for _, text in steps]
    assert texts[0] == "cd ml-project"
    for target in ("make install", "make test", "make train", "make mlflow-ui"):
        assert any(text.startswith(target) for text in texts), target
    assert "git push -u origin gpu/demo" in proc.stdout
    assert "make bootstrap" in proc.stdout


# ------------------------------------------------------------------------------ the platform pin (issue 31)
@pytest.mark.parametrize(
    ("url", "repository"),
    [
        ("https://github.com/acme/mlops-template.git", "acme/mlops-template"),
        ("https://github.com/acme/mlops-template", "acme/mlops-template"),
        ("https://x-access-token:ghs_secret@github.com/acme/tpl.git", "acme/tpl"),
        ("ssh://git@github.com/acme/tpl.git", "acme/tpl"),
        ("git@github.com:acme-labs/tpl.v2_x.git", "acme-labs/tpl.v2_x"),
        ("https://gitlab.com/acme/tpl.git", None),
        ("https://github.com/acme", None),
        ("https://github.com/-acme/tpl.git", None),
        ("https://github.com/acme/tpl.wiki.git", None),
        (f"https://github.com/{'a' * 40}/tpl", None),
        ("/srv/templates/tpl", None),
    ],
)
def test_a_github_remote_names_its_repository(url: str, repository: str | None) -> None:
    github_repository = load_hook("post_gen_project", default_answers())["github_repository"]

    assert github_repository(url) == repository


@dataclass
class TemplateRepo:
    path: Path
    commit: str

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.path), *args], check=True, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip


@pytest.fixture
def template_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TemplateRepo:
    """A committed template checkout holding platform/, and a cwd outside it (where the project is baked)."""
    path = tmp_path / "template"
    (path / "platform").mkdir(parents=True)
    (path / "cookiecutter.json").write_text("{}\n", encoding="utf-8")
    (path / "platform" / "pyproject.toml").write_text('[project]\nname = "gpu-runner"\n', encoding="utf-8")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid"}  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    repo = TemplateRepo(path, "")
    repo.git("init", "-q")
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "template")
    repo.commit = repo.git("rev-parse", "HEAD")
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path / "out")
    return repo


def pin(repo: TemplateRepo, **answers: str) -> tuple[dict[str, str] | None, str]:
    platform_pin = load_hook("post_gen_project", default_answers())["platform_pin"]
    # A local checkout: cookiecutter's _repo_dir is the _template string itself.
    return platform_pin({"_repo_dir": str(repo.path), "_template": str(repo.path), **answers})


def test_the_platform_is_pinned_at_the_templates_commit_of_its_github_repository(
    template_repo: TemplateRepo,
) -> None:
    template_repo.git("remote", "add", "origin", "git@github.com:acme/mlops-template.git")

    assert pin(template_repo) == ({"repository": "acme/mlops-template", "commit": template_repo.commit}, "")
    # An answer names another repository (a fork pushed under another name): it wins.
    assert pin(template_repo, platform_repository="acme-ml/tpl") == (
        {"repository": "acme-ml/tpl", "commit": template_repo.commit},
        "",
    )


def test_a_template_with_no_github_repository_asks_for_one(template_repo: TemplateRepo) -> None:
    pinned, why = pin(template_repo)
    assert pinned is None
    assert (
        "no origin remote" in why
        and "platform_repository=<owner>/<name>" in why
        and template_repo.commit in why
    )
    template_repo.git("remote", "add", "origin", "https://gitlab.com/acme/tpl.git")
    pinned, why = pin(template_repo)
    assert pinned is None and "from https://gitlab.com/acme/tpl.git, not from a GitHub repository" in why
    pinned, why = pin(template_repo, platform_repository="acme")
    assert pinned is None and "platform_repository 'acme' is not <owner>/<name>" in why


def test_no_clean_commit_holding_the_platform_no_pin(template_repo: TemplateRepo) -> None:
    template_repo.git("remote", "add", "origin", "https://github.com/acme/tpl.git")
    (template_repo.path / "platform" / "pyproject.toml").write_text("changed\n", encoding="utf-8")
    pinned, why = pin(template_repo)
    assert (
        pinned is None
        and "uncommitted changes" in why
        and "pins its platform at the template's commit" in why
    )
    template_repo.git("rm", "-q", "-r", "-f", "platform")
    template_repo.git("commit", "-q", "-m", "no platform")
    pinned, why = pin(template_repo)
    assert pinned is None and "has no platform/pyproject.toml to pin" in why


def test_under_cruft_the_pin_is_the_commit_cruft_checked_out() -> None:
    """`cruft create` and `make template-update` render with `_commit` and `_template` in the context and no
    checkout the hook can read: the pin is those two (or the answered repository)."""
    platform_pin = load_hook("post_gen_project", default_answers())["platform_pin"]
    commit = "a" * 40

    assert platform_pin({"_commit": commit, "_template": "https://github.com/acme/tpl.git"}) == (
        {"repository": "acme/tpl", "commit": commit},
        "",
    )
    answered = {"_commit": commit, "_template": "/srv/tpl", "platform_repository": "acme/x"}
    assert platform_pin(answered) == ({"repository": "acme/x", "commit": commit}, "")
    pinned, why = platform_pin({"_commit": commit, "_template": "/srv/tpl"})
    assert pinned is None and "answer platform_repository=<owner>/<name> in .cruft.json's context" in why
