"""`make e2e` runs a train.yml that differs from the real one only by the GPU job's container."""

from __future__ import annotations

import yaml
from harness import PROJECT, host_mode_workflow


def test_host_mode_copy_differs_only_by_the_train_container() -> None:
    real = (PROJECT / ".github" / "workflows" / "train.yml").read_text()
    host = yaml.safe_load(host_mode_workflow(real))
    original = yaml.safe_load(real)
    assert "container" in original["jobs"]["train"]
    assert "container" not in host["jobs"]["train"]
    del original["jobs"]["train"]["container"]
    assert host == original
