"""What does a sweep cost besides training, and what does `parallel` buy? Real plan, trial and collect commands
on this machine's CPU, N trials one after another and then P at once.

    make bench
    uv run --locked --extra cpu python benchmarks/sweep_bench.py --trials 4 --parallel 2 --json sweep-bench.json

Every run uses the same study config (the digits, `--epochs` each, no pruning) against a local MLflow store and
a local study folder in a temporary directory. Waves as sweep.yml runs them: a `sweep plan`, its trials as
`sweep trial` processes started together (as the matrix starts its GPU jobs), then `sweep collect`, every command
a fresh interpreter as every workflow job is; once with parallel 1 (one after another) and once with parallel P.
And `sweep local` (`make sweep`: one process, TensorFlow imported once). It prints the seconds of each phase (plan, trial, collect; median per call) and the two wall
times. On a GPU sweep a trial's wall time also holds its runner's launch and teardown: the offline story's report
gives those (make e2e). A benchmark, not a test: it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

PACKAGE = "{{ cookiecutter.package_name }}"


def _configs(workdir: Path, name: str, trials: int, parallel: int, epochs: int) -> tuple[Path, Path]:
    train = {
        "training": {
            "epochs": epochs,
            "early_stopping_patience": 50,
            "checkpoint_dir": str(workdir / "ckpt"),
        },
        "export": {"output_dir": str(workdir / "out"), "tflite": False},
        "tracking": {"experiment_name": "sweep-bench", "log_system_metrics": False, "log_model": False},
        "registry": {"enabled": False},
    }
    sweep = {
        "study_name": name,
        "space": {"training.learning_rate": {"type": "float", "low": 0.001, "high": 0.01, "log": True}},
        "trials": trials,
        "parallel": parallel,
        "pruner": {"name": "none"},
        "budget": {"epochs_per_trial": epochs},
    }
    train_path, sweep_path = workdir / f"train-{name}.yaml", workdir / f"sweep-{name}.yaml"
    train_path.write_text(yaml.safe_dump(train))
    sweep_path.write_text(yaml.safe_dump(sweep))
    return train_path, sweep_path


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", PACKAGE, "sweep", *args]


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def sequential(workdir: Path, env: dict[str, str], trials: int, epochs: int) -> dict[str, float]:
    train, sweep = _configs(workdir, "bench-local", trials, 1, epochs)
    common = ["--sweep", str(sweep), "--config", str(train), "--storage-root", str(workdir / "studies")]
    return {"wall_seconds": _timed(_command("local", *common), env)}


def in_parallel(
    workdir: Path, env: dict[str, str], trials: int, parallel: int, epochs: int
) -> dict[str, float]:
    train, sweep = _configs(workdir, f"bench-parallel-{parallel}", trials, parallel, epochs)
    common = ["--sweep", str(sweep), "--config", str(train), "--storage-root", str(workdir / "studies")]
    plans, trial_jobs, collects = [], [], []
    started = time.perf_counter()
    while True:
        out = workdir / "github-output"
        out.write_text("")
        plans.append(
            _timed(_command("plan", *common, "--runners", str(parallel)), {**env, "GITHUB_OUTPUT": str(out)})
        )
        values = _outputs(out)
        legs = [leg["trial"] for leg in json.loads(values["matrix"])["include"]]
        wave_started = time.perf_counter()
        processes = [
            subprocess.Popen(
                _command("trial", *common, "--trial", str(n)),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for n in legs
        ]
        for process in processes:
            if process.wait() != 0:
                raise SystemExit(f"a trial process exited {process.returncode}")
        trial_jobs.append(time.perf_counter() - wave_started)
        out.write_text("")
        collects.append(
            _timed(_command("collect", *common, "--wave", values["wave"]), {**env, "GITHUB_OUTPUT": str(out)})
        )
        if _outputs(out).get("next-wave") != "true":
            break
    return {
        "wall_seconds": time.perf_counter() - started,
        "waves": float(len(plans)),
        "plan_seconds_median": statistics.median(plans),
        "wave_trial_seconds_median": statistics.median(trial_jobs),
        "collect_seconds_median": statistics.median(collects),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}",
            "TF_CPP_MIN_LOG_LEVEL": "2",
        }
        for key in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS"):
            env.pop(key, None)
        local = sequential(workdir, env, args.trials, args.epochs)
        one = in_parallel(workdir, env, args.trials, 1, args.epochs)
        many = in_parallel(workdir, env, args.trials, args.parallel, args.epochs)
    figures = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "trials": args.trials,
        "parallel": args.parallel,
        "epochs": args.epochs,
        "sweep_local": local,
        "one_after_another": one,
        "at_parallel": many,
    }
    print(f"sweep of {args.trials} trials x {args.epochs} epochs on the digits, CPU ({figures['machine']})")
    print(f"{'':44s}{'parallel 1':>12s}{f'parallel {args.parallel}':>12s}")
    for label, key in (
        ("wall time, all waves (s)", "wall_seconds"),
        ("waves", "waves"),
        ("plan, median per wave (s)", "plan_seconds_median"),
        ("the wave's trial processes, median (s)", "wave_trial_seconds_median"),
        ("collect, median per wave (s)", "collect_seconds_median"),
    ):
        print(f"  {label:42s}{one[key]:12.1f}{many[key]:12.1f}")
    print(f"  make sweep (one process, parallel 1): {local['wall_seconds']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
