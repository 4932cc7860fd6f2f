"""A job's MLflow run as the workflows need it (gpu_job.tracking): where runs go, the tags that lead back to the
commit, the workflow run and the hardware, the tag values every MLflow store accepts, the closing summary."""

import subprocess
from pathlib import Path

import pytest

from gpu_job.gpu_preflight import Driver
from gpu_job.tracking import (
    format_summary,
    gpu_tags,
    job_summary,
    run_link,
    run_tag_entities,
    run_tags,
    tag_value,
    tracking_uri,
)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_tags_in_github_actions_link_the_workflow_run() -> None:
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SHA": "a" * 40,
        "GITHUB_REF_NAME": "train/demo",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "org/repo",
        "GITHUB_RUN_ID": "777",
        "GITHUB_RUN_ATTEMPT": "2",
    }
    tags = run_tags(env)
    assert tags["git.commit"] == "a" * 40
    assert tags["git.branch"] == "train/demo"
    assert tags["github.run_url"] == "https://github.com/org/repo/actions/runs/777/attempts/2"


def test_tags_name_the_gpu_hardware() -> None:
    tags = run_tags({"GPU_INSTANCE_TYPE": "g5.xlarge", "GPU_MARKET": "spot"})
    assert (tags["gpu.instance_type"], tags["gpu.market"]) == ("g5.xlarge", "spot")


def test_gpu_tags_name_the_gpus_driver_and_tensorflow_build() -> None:
    a10g = {"name": "NVIDIA A10G", "memory_total_mib": "23028"}
    driver = Driver(version="595.91.07", cuda_version="13.2", gpus=(a10g, a10g), source="NVML")
    build = {"is_cuda_build": True, "cuda_version": "12.2", "cudnn_version": "8"}
    assert gpu_tags(2, build, driver, allow_cpu=False) == {
        "gpu.count": "2",
        "gpu.name": "NVIDIA A10G",
        "gpu.memory_mib": "23028, 23028",
        "gpu.driver": "595.91.07",
        "gpu.driver_cuda": "13.2",
        "tf.build_cuda": "12.2",
        "tf.build_cudnn": "8",
        "gpu.allow_cpu": "false",
    }


def test_mlflow_system_metrics_can_read_nvidia_gpus() -> None:
    # MLflow's GPU monitor imports `pynvml` (nvidia-ml-py) and refuses to start without it; with it installed,
    # on this machine without a driver, it gets as far as NVML, which finds no GPU.
    from mlflow.system_metrics.metrics import gpu_monitor

    with pytest.raises(RuntimeError, match="Failed to initialize NVML"):
        gpu_monitor.GPUMonitor()


def test_tags_outside_actions_come_from_git(in_tmp: Path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q", "-b", "feature/x")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "c")
    tags = run_tags({})
    assert tags["git.commit"] == git("rev-parse", "HEAD")
    assert tags["git.branch"] == "feature/x"
    assert "github.run_url" not in tags


def test_outside_git_and_actions_there_are_no_source_tags(in_tmp: Path) -> None:
    tags = run_tags({})
    assert "git.commit" not in tags and "git.branch" not in tags and "github.run_url" not in tags


def test_tracking_uri_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri() == "sqlite:///mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert tracking_uri() == "http://127.0.0.1:5999"


def test_summary_says_how_to_open_the_run() -> None:
    assert run_link("http://mlflow:5000/", "3", "abc") == "http://mlflow:5000/#/experiments/3/runs/abc"
    text = format_summary("sqlite:///mlflow.db", "1", "abc", {"test_accuracy": 0.98765})
    assert "MLflow run abc" in text
    assert "test_accuracy  0.9877" in text
    assert "mlflow ui --backend-store-uri sqlite:///mlflow.db" in text


def test_job_summary_links_the_run_and_lists_metrics() -> None:
    text = job_summary("http://mlflow:5000", "3", "abc", {"test_accuracy": 0.9812, "epochs_run": 4.0})
    assert "MLflow run: [abc](http://mlflow:5000/#/experiments/3/runs/abc)" in text
    assert "| test_accuracy | 0.9812 |" in text


def test_tag_values_are_converted_once_and_none_is_refused() -> None:
    tags = run_tag_entities({"registry.version": 3, "a": "b"})
    assert [(t.key, t.value) for t in tags] == [("registry.version", "3"), ("a", "b")]
    with pytest.raises(ValueError, match=r"'champion\.previous_version' has no value"):
        tag_value("champion.previous_version", None)
