"""Figures for this machine: bake, install, test suite, input pipeline, and the article's GPU cost scenario.

The cost scenario prices the article's 100 GPU-hours a month with this project's measured per-job overhead.

    make bench                                  # everything: 4-6 minutes on 2 cores
    uv run --locked python benchmarks/run.py --skip-tests --repeats 3

The cost figures are arithmetic over list prices and the offline story's timeline (see bench_cost); with
--skip-story they use the timeline of the last full run in --json, if any.

A benchmark, not a test: it prints what it measured and asserts nothing about speed. It exits non-zero only
when a step fails outright (a bake, `uv sync`, the generated tests or the pipeline benchmark).
The table is also written as JSON to build/bench.json.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from composition import rows as composition_rows
from cookiecutter.main import cookiecutter

TEMPLATE_ROOT = Path(__file__).resolve().parents[1]
# The bench bakes as the tests do (issue 31): a clean snapshot of the working tree, pinning the platform at it
# under a stand-in GitHub name that git's insteadOf sends back to this checkout.
sys.path.insert(0, str(TEMPLATE_ROOT / "tests"))
from template_snapshot import PLATFORM_REPOSITORY, bakeable_template, snapshot_git_env  # noqa: E402

DEFAULT_JSON = TEMPLATE_ROOT / "build" / "bench.json"
TF_EXTRA = "cpu"
PIPELINE_SCRIPT = "benchmarks/pipeline_throughput.py"
# The generated suite's tiers, in the order CI reports them, and the figures measured before the split.
TEST_TIERS = ("test", "test-slow")
TEST_SUITE_BEFORE = TEMPLATE_ROOT / "benchmarks" / "test_suite_before.json"
# Generous ceilings so a hung step ends the run instead of the CI job's timeout doing it.
STEP_TIMEOUT_SECONDS = 1200

Row = dict[str, object]

# ---- the article's scenario (the product's whole point): always-on T4 box $500/month vs a CPU dev box
# $80/month + 100 GPU-hours on demand at $0.5/h = $130/month -> 74 % saving on paper.
ARTICLE_ALWAYS_ON_USD_PER_MONTH = 500.0
ARTICLE_CPU_USD_PER_MONTH = 80.0
ARTICLE_GPU_USD_PER_HOUR = 0.5
TRAINING_HOURS_PER_MONTH = 100.0
JOB_HOURS = 2.0  # each training job: 100 h/month -> 50 jobs, each paying the per-job overhead once
# g4dn.xlarge (1x T4), us-east-1, Linux. Taken from the platform's dated price table (PRICE_TABLE, the stop
# job's fallback); these are the figures when it lacks them:
# on-demand, the AWS list price ($0.526/h since the type launched, as of 2026-11); spot, an ASSUMPTION, not a
# quote: a typical us-east-1 price, about 40 % of on-demand (spot moves hourly and per zone), 2026-11.
PRICE_TABLE = TEMPLATE_ROOT / "platform" / "src" / "gpu_runner" / "cost" / "prices.json"
PRICE_REGION, PRICE_TYPE = "us-east-1", "g4dn.xlarge"
FALLBACK_PRICES = {"on_demand": 0.526, "spot": 0.2104, "gp3": 0.08, "as_of": "2026-11 (run.py constants)"}
# Root volume: configs/gpu-runner.yaml's root_volume_gb, billed only while the instance exists.
ROOT_VOLUME_GB = 100
# ASSUMPTION for what the offline story cannot measure: a real EC2 boot of the Deep Learning AMI to a
# registered runner (~1.5 min) plus the train job installing the locked `gpu` extra on the host (host mode,
# the platform manual's gpu-runtime.md: ~2.6 GB of wheels, ~2.5 min; a pre-baked AMI skips it).
REAL_BOOT_AND_PULL_SECONDS = 240.0
# The story's timeline rows that are per-job machine time around the training itself (see bench_story).
STORY_OVERHEAD_PHASES = (
    "launch call (gpu-runner launch step)",
    "wait step (gpu-runner wait)",
    "teardown step (stop job)",
)


class StepFailed(RuntimeError):
    """A benchmarked command exited non-zero; the message carries the tail of its output."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="bakes to time; the median is reported")
    parser.add_argument("--skip-tests", action="store_true", help="do not time the generated test suite")
    parser.add_argument(
        "--skip-story", action="store_true", help="do not run the offline story (act, ~2 min)"
    )
    parser.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, metavar="PATH", help="default: %(default)s"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be positive")
    return args


def uv_command() -> list[str]:
    """uv from PATH, else the pip-installed module, the same fallback as the Makefile's UV."""
    found = shutil.which("uv")
    if found:
        return [found]
    if importlib.util.find_spec("uv") is not None:
        return [sys.executable, "-m", "uv"]
    raise SystemExit("uv not found: run `make uv` first")


def project_env() -> dict[str, str]:
    """The environment for commands inside the baked project.

    `make bench` runs under `uv run`, which exports this template's venv; left in place, uv warns about the
    mismatch and tools could resolve against the wrong interpreter.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT"))}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env | snapshot_git_env(TEMPLATE_ROOT)


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    """Wall time of `cmd` and its combined output; raises StepFailed when it exits non-zero."""
    start = time.perf_counter()
    result = subprocess.run(
        cmd,
        cwd=cwd,
        env=project_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=STEP_TIMEOUT_SECONDS,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise StepFailed(f"`{shlex.join(cmd)}` exited {result.returncode}:\n{result.stdout[-4000:]}")
    return elapsed, result.stdout


@contextlib.contextmanager
def stdout_silenced() -> Iterator[None]:
    """Silence file descriptor 1: the post-gen hook is a subprocess, so redirect_stdout would not reach it."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def bake(template: Path, output_dir: Path, config_file: Path) -> Path:
    with stdout_silenced():
        return Path(
            cookiecutter(
                str(template),
                no_input=True,
                output_dir=str(output_dir),
                config_file=str(config_file),
                extra_context={"platform_repository": PLATFORM_REPOSITORY},
            )
        )


def write_cookiecutter_config(workdir: Path) -> Path:
    """Keep cookiecutter's replay files and clones in the scratch dir, out of the user's home."""
    path = workdir / "cookiecutter.yaml"
    path.write_text(
        f"cookiecutters_dir: {json.dumps(str(workdir / 'cookiecutters'))}\n"
        f"replay_dir: {json.dumps(str(workdir / 'replay'))}\n",
        encoding="utf-8",
    )
    return path


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def bench_bakes(workdir: Path, repeats: int) -> tuple[list[Row], Path]:
    """Median bake time over `repeats` fresh output dirs; returns the rows and the last baked project."""
    config_file = write_cookiecutter_config(workdir)
    template = bakeable_template(TEMPLATE_ROOT)
    times, project = [], workdir
    for index in range(repeats):
        start = time.perf_counter()
        project = bake(template, workdir / f"bake-{index}", config_file)
        times.append(time.perf_counter() - start)
    progress(f"baked {repeats}x, median {statistics.median(times):.2f} s")
    rows: list[Row] = [
        {
            "figure": f"bake, cookiecutter API, no_input (median of {repeats})",
            "value": statistics.median(times),
            "unit": "s",
        },
        {"figure": "bake, fastest", "value": min(times), "unit": "s"},
    ]
    return rows, project


def uv_phase_seconds(output: str) -> dict[str, float]:
    """uv's own split of a sync: 'Installed 148 packages in 670ms', 'Bytecode compiled 17086 files in 20s'."""
    phases = {}
    for phase, pattern in (
        ("link", r"Installed \d+ packages? in ([\d.]+)(ms|s)\b"),
        ("bytecode", r"Bytecode compiled \d+ files? in ([\d.]+)(ms|s)\b"),
    ):
        match = re.search(pattern, output)
        if match:
            phases[phase] = float(match[1]) / (1000 if match[2] == "ms" else 1)
    return phases


def bench_install(project: Path, uv: list[str]) -> list[Row]:
    sync = [*uv, "sync", "--locked", "--extra", TF_EXTRA]
    label = f"uv sync --locked --extra {TF_EXTRA}"
    rows: list[Row] = []
    # "Cold-ish": uv's cache holds whatever this machine already had; truly cold only on a new machine.
    for name, fresh_venv in (("first (uv cache as found)", False), ("warm cache, new .venv", True)):
        if fresh_venv:
            shutil.rmtree(project / ".venv")
        elapsed, output = timed(sync, project)
        phases = uv_phase_seconds(output)
        progress(f"uv sync, {name}: {elapsed:.1f} s {phases}")
        rows.append({"figure": f"{label}, {name}", "value": elapsed, "unit": "s"})
        # The project sets compile-bytecode = true; showing its share explains most of an install's time.
        if "bytecode" in phases:
            rows.append(
                {"figure": "  of which bytecode compilation", "value": phases["bytecode"], "unit": "s"}
            )
    return rows


def pytest_counts(output: str) -> dict[str, int]:
    """Counts from pytest's final summary line, e.g. '62 passed, 1 skipped in 37.69s'."""
    summary = next(
        (line for line in reversed(output.splitlines()) if re.search(r"\d+ \w+.* in [\d.]+s", line)), ""
    )
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (\w+)", summary)}
    # Warnings are not test outcomes; every other word (failed, skipped, xfailed, error, ...) is.
    return {word: number for word, number in counts.items() if not word.startswith("warning")}


def children_cpu_seconds() -> float:
    """User + system CPU of every finished child process so far (make, pytest, its workers and the servers
    they stopped): on a shared machine the wall time says more about the neighbours than about the suite."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_test_tier(project: Path, uv: list[str], target: str) -> list[Row]:
    """One tier of the generated suite (`make test`: every push; `make test-slow`: CI's second job)."""
    cmd = ["make", target, f"UV={shlex.join(uv)}", "PYTEST_ARGS=-q -p no:cacheprovider"]
    cpu_before = children_cpu_seconds()
    try:
        elapsed, output = timed(cmd, project)
    except StepFailed as error:
        counts = pytest_counts(str(error))
        raise StepFailed(f"generated `make {target}` failed ({counts or 'no summary'}):\n{error}") from None
    cpu = children_cpu_seconds() - cpu_before
    counts = pytest_counts(output)
    progress(f"make {target} {elapsed:.1f} s wall, {cpu:.1f} s CPU, {counts}")
    name = f"generated project: make {target}"
    rows: list[Row] = [
        {"figure": f"{name}, wall time", "value": elapsed, "unit": "s"},
        {"figure": f"{name}, CPU time (user+sys)", "value": cpu, "unit": "s"},
    ]
    rows += [
        {"figure": f"{name}, tests {word}", "value": number, "unit": "tests"}
        for word, number in counts.items()
    ]
    return rows


def test_suite_before_rows(path: Path = TEST_SUITE_BEFORE) -> list[Row]:
    """The suite as measured before it had tiers (one `make test` ran all but e2e), from its data file."""
    before = json.loads(path.read_text(encoding="utf-8"))
    name = f"generated project before ({before['commit']}, measured {before['date']}): make test"
    return [
        {"figure": f"{name}, wall time", "value": before["wall_seconds"], "unit": "s"},
        {"figure": f"{name}, CPU time (user+sys)", "value": before["cpu_seconds"], "unit": "s"},
        {"figure": f"{name}, tests passed", "value": before["passed"], "unit": "tests"},
    ]


def bench_tests(project: Path, uv: list[str]) -> list[Row]:
    """Before (the data file) and after (measured now): the push tier, then the slow tier."""
    rows = test_suite_before_rows()
    for target in TEST_TIERS:
        rows += bench_test_tier(project, uv, target)
    return rows


def bench_pipeline(project: Path, uv: list[str], workdir: Path) -> tuple[list[Row], dict[str, object]]:
    """Run the generated project's own benchmark in its own venv (TensorFlow lives there, not here)."""
    out = workdir / "pipeline.json"
    cmd = [*uv, "run", "--locked", "--extra", TF_EXTRA, "python", PIPELINE_SCRIPT, "--json", str(out)]
    elapsed, _ = timed(cmd, project)
    progress(f"pipeline benchmark {elapsed:.1f} s")
    payload = json.loads(out.read_text(encoding="utf-8"))
    rows = [{**row, "figure": f"pipeline: {row['figure']}"} for row in payload["rows"]]
    return rows, payload["meta"]


def bench_story(project: Path, uv: list[str]) -> tuple[list[Row], dict[str, object]]:
    """The offline story (`make story`: the real train.yml under act against local AWS, GitHub and MLflow) and
    the per-phase timeline its test writes to .e2e-cache/report.json; returns the rows and that report."""
    subprocess.run(["git", "init", "-q"], cwd=project, check=False)
    elapsed, _ = timed(
        ["make", "story", f"UV={shlex.join(uv)}", "PYTEST_ARGS=-q -p no:cacheprovider"], project
    )
    report = json.loads((project / ".e2e-cache" / "report.json").read_text(encoding="utf-8"))
    timeline = report["timeline"]
    progress(f"offline story {elapsed:.1f} s: {timeline}")
    rows: list[Row] = [
        {"figure": "offline story: make story, wall time (incl. servers)", "value": elapsed, "unit": "s"}
    ]
    rows += [
        {"figure": f"offline story: {phase}", "value": seconds, "unit": "s"}
        for phase, seconds in timeline.items()
    ]
    # The train job's own setup (checkout, install; the story's training is on this machine's CPU): the job's
    # wall time minus the training time its MLflow run logged.
    training = report.get("story", {}).get("metrics", {}).get("training_seconds")
    if training is not None and "train job start -> end" in timeline:
        setup = max(float(timeline["train job start -> end"]) - float(training), 0.0)
        rows.append(
            {
                "figure": "offline story: train job setup (job minus training_seconds)",
                "value": setup,
                "unit": "s",
            }
        )
    return rows, report


# Run in the baked project's venv, where the runner distribution is installed: the benchmark prices with the
# very month and formula `gpu-runner cost-report` uses (gpu_runner.cost), not a copy of them.
COST_FORMULA_SCRIPT = """
import json, sys
from gpu_runner.cost.record import HOURS_PER_MONTH
from gpu_runner.cost.report import monthly_saving_pct
out, triples = sys.argv[1], json.loads(sys.argv[2])
savings = {key: monthly_saving_pct(*args) for key, args in triples.items()}
json.dump({"hours_per_month": HOURS_PER_MONTH, "savings": savings}, open(out, "w", encoding="utf-8"))
"""


def cost_formula(
    project: Path, uv: list[str], workdir: Path, triples: dict[str, tuple[float, float, float]]
) -> tuple[float, dict[str, float]]:
    """The runner's 730-hour month and its saving % for each (always-on, CPU, GPU) monthly triple."""
    out = workdir / "cost-formula.json"
    cmd = [*uv, "run", "--locked", "--extra", TF_EXTRA, "python", "-c", COST_FORMULA_SCRIPT, str(out)]
    timed([*cmd, json.dumps(triples)], project)
    payload = json.loads(out.read_text(encoding="utf-8"))
    return float(payload["hours_per_month"]), {key: float(value) for key, value in payload["savings"].items()}


def story_overhead_seconds(rows: list[Row]) -> float | None:
    """Per-job machine time the offline story measured around training: launch, wait, train-job setup and
    teardown; None when the rows lack any of them."""
    values = {str(row["figure"]).removeprefix("offline story: "): row["value"] for row in rows}
    wanted = [*STORY_OVERHEAD_PHASES, "train job setup (job minus training_seconds)"]
    if not all(phase in values for phase in wanted):
        return None
    return sum(float(values[phase]) for phase in wanted)  # type: ignore[arg-type]


def previous_story_rows(path: Path) -> list[Row]:
    """The story rows of the last run written to --json (for --skip-story), or none."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8")).get("rows", [])
    except (OSError, ValueError):
        return []
    return [row for row in rows if str(row.get("figure", "")).startswith("offline story: ")]


def list_prices() -> dict[str, object]:
    """On-demand and typical spot $/h of g4dn.xlarge in us-east-1 and gp3 $/GB-month, with their date."""
    try:
        table = json.loads(PRICE_TABLE.read_text(encoding="utf-8"))
        region = table["regions"][PRICE_REGION]
        return {
            "on_demand": float(region["on_demand_usd_per_hour"][PRICE_TYPE]),
            "spot": float(region["spot_typical_usd_per_hour"][PRICE_TYPE]),
            "gp3": float(region["gp3_usd_per_gb_month"]),
            "as_of": f"{table.get('as_of', 'undated')} ({PRICE_TABLE.relative_to(TEMPLATE_ROOT)})",
        }
    except (OSError, ValueError, KeyError, TypeError):
        return dict(FALLBACK_PRICES)


def bench_cost(
    project: Path, uv: list[str], workdir: Path, story_rows: list[Row], story_source: str
) -> tuple[list[Row], dict[str, object]]:
    """The article's 100 GPU-hours a month, as 2-hour jobs that each pay our per-job overhead, at g4dn.xlarge
    on-demand and spot prices, against the article's $500 always-on box and against 730 h of on-demand."""
    hours_per_month, _ = cost_formula(project, uv, workdir, {})
    prices = list_prices()
    on_demand_price, spot_price, gp3 = float(prices["on_demand"]), float(prices["spot"]), float(prices["gp3"])
    measured = story_overhead_seconds(story_rows)
    overhead_s = (measured or 0.0) + REAL_BOOT_AND_PULL_SECONDS
    jobs = math.ceil(TRAINING_HOURS_PER_MONTH / JOB_HOURS)
    billed_h = TRAINING_HOURS_PER_MONTH + jobs * overhead_s / 3600
    volume_usd = billed_h * ROOT_VOLUME_GB * gp3 / hours_per_month
    on_demand_usd = billed_h * on_demand_price + volume_usd
    spot_usd = billed_h * spot_price + volume_usd
    always_on_730 = hours_per_month * on_demand_price
    paper = "article on paper"
    triples = {
        paper: (
            ARTICLE_ALWAYS_ON_USD_PER_MONTH,
            ARTICLE_CPU_USD_PER_MONTH,
            TRAINING_HOURS_PER_MONTH * ARTICLE_GPU_USD_PER_HOUR,
        )
    }
    for basis, always_on in (
        ("$500 article box", ARTICLE_ALWAYS_ON_USD_PER_MONTH),
        ("730 h on-demand", always_on_730),
    ):
        for cpu in (ARTICLE_CPU_USD_PER_MONTH, 0.0):
            for market, gpu in (("on-demand", on_demand_usd), ("spot", spot_usd)):
                triples[f"saving vs {basis}, CPU ${cpu:g} + GPU {market}"] = (always_on, cpu, gpu)
    _, savings = cost_formula(project, uv, workdir, triples)

    def article_saving(market: str) -> float:
        return savings[f"saving vs $500 article box, CPU ${ARTICLE_CPU_USD_PER_MONTH:g} + GPU {market}"]

    label = f"{TRAINING_HOURS_PER_MONTH:g} GPU-h/month in {jobs} jobs"
    rows: list[Row] = [
        {
            "figure": "cost: article on paper, $500 always-on vs $80 CPU + 100 h x $0.5",
            "value": savings[paper],
            "unit": "%",
        },
        {
            "figure": f"cost: overhead per job, offline story ({story_source})",
            "value": measured if measured is not None else "n/a",
            "unit": "s",
        },
        {
            "figure": "cost: overhead per job, real EC2 boot + TensorFlow install (assumed)",
            "value": REAL_BOOT_AND_PULL_SECONDS,
            "unit": "s",
        },
        {"figure": f"cost: {label}: billed GPU hours", "value": billed_h, "unit": "h"},
        {
            "figure": "cost:   of which overhead",
            "value": 100 * (billed_h - TRAINING_HOURS_PER_MONTH) / billed_h,
            "unit": "%",
        },
        {
            "figure": f"cost: GPU on-demand ${on_demand_price}/h + root volume",
            "value": on_demand_usd,
            "unit": "USD/month",
        },
        {
            "figure": f"cost: GPU spot ${spot_price}/h (typical) + root volume",
            "value": spot_usd,
            "unit": "USD/month",
        },
        {
            "figure": f"cost: always-on g4dn.xlarge, 730 h x ${on_demand_price}/h",
            "value": always_on_730,
            "unit": "USD/month",
        },
    ]
    rows += [{"figure": f"cost: {k}", "value": v, "unit": "%"} for k, v in savings.items() if k != paper]
    progress(f"cost: {billed_h:.2f} billed h, on-demand ${on_demand_usd:.2f}, spot ${spot_usd:.2f} per month")
    assumptions: dict[str, object] = {
        "g4dn.xlarge us-east-1 on-demand USD/h": on_demand_price,
        "g4dn.xlarge us-east-1 spot USD/h (typical, not a quote)": spot_price,
        "prices as of": prices["as_of"],
        "root volume": f"{ROOT_VOLUME_GB} GB gp3 at ${gp3}/GB-month",
        "per-job overhead s (story + assumed boot/install)": round(overhead_s, 1),
        "jobs x hours": f"{jobs} x {JOB_HOURS:g} h",
        "month": f"{hours_per_month:g} h",
        "not counted": "spot interruptions (a resumed attempt pays the overhead again), S3, traffic, "
        "GitHub-hosted CPU jobs",
        # The closing note's figure: the article's own comparison, with our overhead and today's prices.
        "headline": (
            f"article scenario ($500 always-on vs $80 CPU box + {label}, {overhead_s / 60:.1f} min overhead "
            f"per job): saving {article_saving('on-demand'):.1f} % on-demand, "
            f"{article_saving('spot'):.1f} % spot"
        ),
    }
    return rows, assumptions


def format_value(value: object, unit: object) -> str:
    if isinstance(value, int | str):
        return str(value)
    number = float(value)  # type: ignore[arg-type]
    if unit == "samples/s":
        return f"{number:,.0f}"
    return f"{number:,.2f}"


def format_table(rows: list[Row]) -> str:
    cells = [("figure", "value", "unit")]
    cells += [(str(row["figure"]), format_value(row["value"], row["unit"]), str(row["unit"])) for row in rows]
    widths = [max(len(cell[column]) for cell in cells) for column in range(3)]
    lines = [f"{a:<{widths[0]}} | {b:>{widths[1]}} | {c}" for a, b, c in cells]
    lines.insert(1, f"{'-' * widths[0]}-+-{'-' * widths[1]}-+-{'-' * widths[2]}")
    return "\n".join(lines)


def machine() -> dict[str, object]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    uv = uv_command()
    rows: list[Row] = []
    meta: dict[str, object] = {"machine_at_start": machine()}
    failure = None
    # Read before this run overwrites it: with --skip-story, the cost model uses the last measured timeline.
    earlier_story = previous_story_rows(args.json)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="template-bench-") as scratch:
        workdir = Path(scratch)
        try:
            bake_rows, project = bench_bakes(workdir, args.repeats)
            rows += bake_rows
            rows += composition_rows(project)
            rows += bench_install(project, uv)
            if not args.skip_tests:
                rows += bench_tests(project, uv)
            pipeline_rows, meta["pipeline"] = bench_pipeline(project, uv, workdir)
            rows += pipeline_rows
            story_rows, story_source = [], "none measured: story skipped"
            if not args.skip_story:
                story_rows, _ = bench_story(project, uv)
                rows += story_rows
                story_source = "this run"
            elif earlier_story:
                story_rows, story_source = earlier_story, f"last full run in {args.json.name}"
            cost_rows, meta["cost_assumptions"] = bench_cost(project, uv, workdir, story_rows, story_source)
            rows += cost_rows
        except (StepFailed, subprocess.TimeoutExpired) as error:
            failure = str(error)
    meta["machine_at_end"] = machine()
    meta["total_seconds"] = round(time.perf_counter() - started, 1)

    print()
    for key, value in meta.items():
        print(f"{key}: {json.dumps(value)}")
    print(format_table(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"meta": meta, "rows": rows, "failure": failure}, indent=2) + "\n", "utf-8"
    )
    print(f"\nwritten: {args.json}")
    if failure:
        print(f"\nFAILED: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
