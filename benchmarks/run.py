"""Figures for this machine: bake time, generated-project install time, its test suite, its input pipeline.

    make bench                                  # everything: 4-6 minutes on 2 cores
    uv run --locked python benchmarks/run.py --skip-tests --repeats 3

A benchmark, not a test: it prints what it measured and asserts nothing about speed. It exits non-zero only
when a step fails outright (a bake, `uv sync`, the generated tests or the pipeline benchmark).
The table is also written as JSON to build/bench.json.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from cookiecutter.main import cookiecutter

TEMPLATE_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = TEMPLATE_ROOT / "build" / "bench.json"
TF_EXTRA = "cpu"
PIPELINE_SCRIPT = "benchmarks/pipeline_throughput.py"
# Generous ceilings so a hung step ends the run instead of the CI job's timeout doing it.
STEP_TIMEOUT_SECONDS = 1200

Row = dict[str, object]


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
    return env


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


def bake(output_dir: Path, config_file: Path) -> Path:
    with stdout_silenced():
        return Path(
            cookiecutter(
                str(TEMPLATE_ROOT), no_input=True, output_dir=str(output_dir), config_file=str(config_file)
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
    times, project = [], workdir
    for index in range(repeats):
        start = time.perf_counter()
        project = bake(workdir / f"bake-{index}", config_file)
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


def bench_tests(project: Path, uv: list[str]) -> list[Row]:
    cmd = ["make", "test", f"UV={shlex.join(uv)}", "PYTEST_ARGS=-q -p no:cacheprovider"]
    try:
        elapsed, output = timed(cmd, project)
    except StepFailed as error:
        counts = pytest_counts(str(error))
        raise StepFailed(f"generated test suite failed ({counts or 'no summary'}):\n{error}") from None
    counts = pytest_counts(output)
    progress(f"make test {elapsed:.1f} s, {counts}")
    rows: list[Row] = [
        {"figure": "generated project: make test, wall time", "value": elapsed, "unit": "s"},
        {"figure": "generated project: tests passed", "value": counts.get("passed", 0), "unit": "tests"},
    ]
    rows += [
        {"figure": f"generated project: tests {word}", "value": number, "unit": "tests"}
        for word, number in counts.items()
        if word != "passed"
    ]
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


def bench_story(project: Path, uv: list[str]) -> list[Row]:
    """The offline story (`make story`: the real train.yml under act against local AWS, GitHub and MLflow) and
    the per-phase timeline its test writes to .e2e-cache/report.json."""
    subprocess.run(["git", "init", "-q"], cwd=project, check=False)
    elapsed, _ = timed(
        ["make", "story", f"UV={shlex.join(uv)}", "PYTEST_ARGS=-q -p no:cacheprovider"], project
    )
    timeline = json.loads((project / ".e2e-cache" / "report.json").read_text(encoding="utf-8"))["timeline"]
    progress(f"offline story {elapsed:.1f} s: {timeline}")
    rows: list[Row] = [
        {"figure": "offline story: make story, wall time (incl. servers)", "value": elapsed, "unit": "s"}
    ]
    rows += [
        {"figure": f"offline story: {phase}", "value": seconds, "unit": "s"}
        for phase, seconds in timeline.items()
    ]
    return rows


def format_value(value: object, unit: object) -> str:
    if isinstance(value, int):
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
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="template-bench-") as scratch:
        workdir = Path(scratch)
        try:
            bake_rows, project = bench_bakes(workdir, args.repeats)
            rows += bake_rows
            rows += bench_install(project, uv)
            if not args.skip_tests:
                rows += bench_tests(project, uv)
            pipeline_rows, meta["pipeline"] = bench_pipeline(project, uv, workdir)
            rows += pipeline_rows
            if not args.skip_story:
                rows += bench_story(project, uv)
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
