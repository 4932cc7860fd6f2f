"""notebooks/: stored without outputs, and the starter notebook executed for real on CPU (nbclient, the ipykernel
kernel of this venv) against the session's MLflow server, in a copy of the project's configs."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
import yaml
from mlflow.tracking import MlflowClient
from nbclient import NotebookClient

from {{ cookiecutter.package_name }}.config import load_config

PROJECT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((PROJECT / "notebooks").glob("*.ipynb"))


def test_there_is_a_starter_notebook() -> None:
    assert [path.name for path in NOTEBOOKS] == ["starter.ipynb"]


def dirty_cells(notebook: nbformat.NotebookNode) -> list[int]:
    """The code cells that hold outputs or an execution count."""
    return [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_notebooks_are_stored_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    dirty = dirty_cells(notebook)
    assert not dirty, (
        f"{path.name}: cells {dirty} hold outputs or execution counts; run `make notebooks-clean`"
    )
    assert "widgets" not in notebook.metadata, f"{path.name}: widget state stored; run `make notebooks-clean`"


def test_a_cell_run_once_is_found() -> None:
    notebook = nbformat.read(NOTEBOOKS[0], as_version=4)
    code = [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
    notebook.cells[code[1]].execution_count = 1
    notebook.cells[code[2]].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x\n")]
    assert dirty_cells(notebook) == code[1:3]


def _outputs(notebook: nbformat.NotebookNode) -> tuple[str, int]:
    text, images = [], 0
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            text.append(output.get("text", "") or "".join(output.get("data", {}).get("text/plain", "")))
            images += "image/png" in output.get("data", {})
    return "\n".join(text), images


@pytest.mark.slow  # a kernel that imports TensorFlow and trains
def test_the_starter_notebook_runs_on_cpu_and_logs_one_epoch(
    tmp_path: Path, mlflow_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(PROJECT / "configs", tmp_path / "configs")
    (tmp_path / "notebooks").mkdir()
    notebook = nbformat.read(PROJECT / "notebooks" / "starter.ipynb", as_version=4)
    experiment = "notebook-starter"
    config = tmp_path / "configs" / "train.yaml"
    raw = yaml.safe_load(config.read_text())
    raw["tracking"]["experiment_name"] = experiment
    config.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)  # the kernel inherits this process's environment

    NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path / "notebooks")}},
    ).execute()

    text, images = _outputs(notebook)
    cfg = load_config(config)
    assert cfg.tracking.experiment_name == experiment
    assert "10 classes; train / validation / test:" in text  # the embedded digits
    assert "smallest / largest class:" in text and images == 2, text
    client = MlflowClient(mlflow_server)
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.metrics["epochs_run"] == 1 and run.data.metrics["test_accuracy"] > 0
    assert f"MLflow run {run.info.run_id} at {mlflow_server}, 1 epoch" in text
    # The session's server holds other tests' models too: what matters is that this run registered none.
    assert client.search_model_versions(f"run_id = '{run.info.run_id}'") == []
    assert (tmp_path / "outputs").is_dir() and not (tmp_path / "notebooks" / "outputs").exists()
