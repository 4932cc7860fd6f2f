"""What does sharing one Optuna study through S3 cost a trial? Ask/report/tell round trips on a local moto server.

    uv run --project platform --locked python platform/benchmarks/study_storage_bench.py --rounds 30 --json study-bench.json

One round is what a sweep's jobs do per trial: ask (the plan job), report one intermediate value (a training
epoch) and tell the result. For 1, 2 and 4 writer processes at once on the same study, it prints the median and
the 90th percentile seconds per round, and how many appends lost a race for a log number and were retried.
moto answers from this machine, so the figures are the storage's own overhead (requests, replay, retries), not
S3's network latency (tens of milliseconds per request in a region). A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

BUCKET = "study-storage-bench"
# Local fake credentials for the moto server only: the benchmark never reaches AWS.
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=20, help="ask/report/tell rounds per writer (default: 20)"
    )
    parser.add_argument(
        "--writers", type=int, nargs="+", default=[1, 2, 4], help="writer processes at once (default: 1 2 4)"
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or min(args.writers) < 1:
        parser.error("--rounds and every --writers value must be at least 1")
    return args


def start_moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    process = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                return process, endpoint
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"moto server did not answer on {endpoint} within 60 s")


def writer(uri: str, study_name: str, rounds: int, start: Any, out: Any) -> None:
    """One process: `rounds` trials through its own storage, each round timed; counts the lost races."""
    import optuna

    from gpu_job.study_storage import open_study_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_study_storage(uri)
    lost = [0]
    client = storage._backend._client  # the benchmark's own view of the backend's requests

    def count_refusal(http_response: Any = None, **_: Any) -> None:
        # 412 PreconditionFailed: another writer has the log number; 409 ConditionalRequestConflict: in flight.
        if http_response is not None and http_response.status_code in {409, 412}:
            lost[0] += 1

    client.meta.events.register("after-call.s3.PutObject", count_refusal)
    study = optuna.load_study(study_name=study_name, storage=storage, sampler=optuna.samplers.RandomSampler())
    start.wait()
    seconds = []
    for _ in range(rounds):
        began = time.perf_counter()
        trial = study.ask()
        x = trial.suggest_float("x", -10, 10)
        trial.report(abs(x), step=0)
        study.tell(trial, x * x)
        seconds.append(time.perf_counter() - began)
    out.put((seconds, lost[0]))


def measure(uri: str, writers: int, rounds: int) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from gpu_job.study_storage import open_study_storage

    name = f"bench-{writers}"
    optuna.create_study(study_name=name, storage=open_study_storage(uri))
    context = multiprocessing.get_context("spawn")
    start, out = context.Barrier(writers), context.Queue()
    jobs = [context.Process(target=writer, args=(uri, name, rounds, start, out)) for _ in range(writers)]
    for job in jobs:
        job.start()
    results = [out.get(timeout=600) for _ in jobs]
    for job in jobs:
        job.join()
    seconds = sorted(s for per_writer, _ in results for s in per_writer)
    return {
        "writers": writers,
        "rounds": len(seconds),
        "median_s": statistics.median(seconds),
        "p90_s": seconds[int(0.9 * (len(seconds) - 1))],
        "lost_races": sum(lost for _, lost in results),
        "trials_in_study": len(optuna.load_study(study_name=name, storage=open_study_storage(uri)).trials),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.update(FAKE_AWS)
    process, endpoint = start_moto()
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    try:
        import boto3

        boto3.client("s3").create_bucket(Bucket=BUCKET)
        rows = []
        for count in args.writers:
            uri = f"s3://{BUCKET}/sweeps/{uuid.uuid4().hex[:8]}/"
            rows.append(measure(uri, count, args.rounds))
    finally:
        process.terminate()
        process.wait(timeout=15)
    print(
        f"study storage on a local moto server ({platform.node()}, {os.cpu_count()} CPUs), one round = ask+report+tell"
    )
    print(
        f"{'writers':>8} {'rounds':>7} {'median s/round':>15} {'p90 s/round':>12} {'lost races':>11} {'trials':>7}"
    )
    for row in rows:
        print(
            f"{row['writers']:>8} {row['rounds']:>7} {row['median_s']:>15.4f} {row['p90_s']:>12.4f} "
            f"{row['lost_races']:>11} {row['trials_in_study']:>7}"
        )
    if args.json:
        args.json.write_text(json.dumps({"study_storage": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
