"""`make e2e` runs the real train.yml: in host mode (the default) the very file, and a train job given a
`container:` runs in a copy that differs from it only by that container."""

from __future__ import annotations

import yaml
from gpu_runner_testing.story.harness import PROJECT, host_mode_workflow

REAL = (PROJECT / ".github" / "workflows" / "train.yml").read_text()


def test_the_default_train_job_runs_on_the_host_unchanged() -> None:
    # Host mode is the default GPU runtime (manual/gpu-runtime.md): nothing is removed, the e2e runs the file itself.
    assert "container" not in yaml.safe_load(REAL)["jobs"]["train"]
    assert host_mode_workflow(REAL) == REAL


def test_a_container_is_the_only_thing_removed() -> None:
    image = "tensorflow/tensorflow:2.15.0.post1-gpu@sha256:" + "0" * 64
    marker = "    permissions:\n      contents: read # check out the code\n"
    assert REAL.count(marker) == 1
    with_container = REAL.replace(
        marker, marker + f"    container:\n      image: {image}\n      options: --gpus all\n"
    )
    host = yaml.safe_load(host_mode_workflow(with_container))
    original = yaml.safe_load(with_container)
    assert original["jobs"]["train"]["container"]["image"] == image
    del original["jobs"]["train"]["container"]
    assert host == original
