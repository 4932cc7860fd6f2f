"""The MLflow run of a project's batch prediction, in `<experiment>-inference`, linked to the model version it used,
and the job summary that says what it did.

The run is opened before the first shard, so its id reaches the workflow (the GPU stop job logs the billed cost
on it) even when the batch does not finish; the figures and the summary are logged when it does. The job
summary quotes input keys and skip reasons, which come from whoever wrote the input: every table cell is
escaped so that a key cannot break or forge the table.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import mlflow
from mlflow.entities import RunInfo

from . import job_contract, tracking
from .batch_predict import Summary

# gpu_runner's mlflow_server_project.INFERENCE_SUFFIX makes this experiment on the team server (the two packages
# never import each other: tests/job/test_batch_tracking.py holds them equal).
INFERENCE_SUFFIX = "-inference"
SKIPPED_SHOWN = 20  # keys listed in the job summary; the summary file and the Parquet rows hold them all


class ServedVersion(Protocol):
    """A registry version a batch used (the project's resolved `--model`), read-only."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def alias(self) -> str | None: ...

    @property
    def uri(self) -> str: ...


@dataclass(frozen=True)
class Batch:
    """What a batch was asked to do: the run's params."""

    source: str
    output: str
    device: str
    export: str
    shard_size: int
    batch_size: int

    def params(self) -> dict[str, str]:
        return {
            "input": self.source,
            "output": self.output,
            "device": self.device,
            "export": self.export,
            "shard_size": str(self.shard_size),
            "batch_size": str(self.batch_size),
        }


def experiment_name(training_experiment: str) -> str:
    return training_experiment + INFERENCE_SUFFIX


def model_tags(model_version: str, registry: ServedVersion | None) -> dict[str, str]:
    """Tags that lead from the inference run to the model version and the run that trained it."""
    if registry is None:
        return {"model.version": model_version, "model.source": "local export"}
    tags = {
        "model.name": registry.name,
        "model.version": registry.version,
        "model.run_id": registry.run_id,
        "model.uri": registry.uri,
        "model.source": "registry",
    }
    if registry.alias:
        tags["model.alias"] = registry.alias
    return tags


@contextmanager
def inference_run(
    training_experiment: str, batch: Batch, model_version: str, registry: ServedVersion | None
) -> Iterator[RunInfo]:
    """An open run for the batch; its id goes to the step output the GPU stop job reads (mlflow-run-id)."""
    mlflow.set_tracking_uri(tracking.tracking_uri())
    mlflow.set_experiment(experiment_name(training_experiment))
    tags = {**tracking.run_tags(), **model_tags(model_version, registry)}
    with mlflow.start_run(tags={k: tracking.tag_value(k, v) for k, v in tags.items()}) as run:
        job_contract.write_step_output(job_contract.MLFLOW_RUN_ID_OUTPUT, run.info.run_id)
        mlflow.log_params(batch.params())
        yield run.info


def log_summary(summary: Summary) -> None:
    """The figures of this run (throughput, p50/p95 batch latency) and the batch's counts, plus its summary."""
    figures = {name: value for name, value in summary.figures().items() if value == value}  # NaN: no image
    mlflow.log_metrics(figures)
    mlflow.log_dict(summary.report(), "predictions/_summary.json")


def job_summary(
    uri: str, experiment_id: str, run_id: str, batch: Batch, model_version: str, summary: Summary
) -> str:
    """The Markdown the workflow's job summary shows: what ran, what came out, what was skipped and why."""
    figures = summary.figures()
    lines = [
        "### Batch prediction",
        "",
        f"- model: `{model_version}` ({batch.export}, on {batch.device})",
        f"- input: `{batch.source}`; output: `{batch.output}`",
        f"- {summary.predicted} of {summary.images} images predicted in {summary.shards} shards "
        f"({summary.shards_done_before} kept from an earlier run), {len(summary.skipped)} skipped",
        f"- mean confidence {summary.mean_confidence:.3f}; "
        + _rate(figures)
        + f"; MLflow run: {tracking.run_link(uri, experiment_id, run_id)}",
        "",
        "| class | images |",
        "|---|---|",
        *(f"| {name} | {count} |" for name, count in summary.class_counts.items()),
    ]
    if summary.skipped:
        lines += ["", "| skipped | reason |", "|---|---|"]
        for key, reason in list(summary.skipped.items())[:SKIPPED_SHOWN]:
            lines.append(f"| `{_cell(key)}` | {_cell(reason)} |")
        if len(summary.skipped) > SKIPPED_SHOWN:
            lines.append(f"| ... | {len(summary.skipped) - SKIPPED_SHOWN} more in `_summary.json` |")
    return "\n".join(lines) + "\n"


def _rate(figures: Mapping[str, float]) -> str:
    if "images_per_second" not in figures:
        return "no image predicted by this run"
    return (
        f"{figures['images_per_second']:.0f} images/s, batch latency p50 {figures['batch_latency_ms_p50']:.1f} ms"
        f" / p95 {figures['batch_latency_ms_p95']:.1f} ms"
    )


def _cell(text: str) -> str:
    """A key or reason inside a Markdown table cell: a |, a backtick or a newline would break the table."""
    return text.replace("|", "\\|").replace("`", "'").replace("\n", " ")[:200]
