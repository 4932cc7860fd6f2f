"""Magnitude pruning (pruning.py): its config, its schedule in steps, a real pruned training on the digits (the
sparsity reached, the stripped model and every export made from it), and a pruned training killed and resumed."""

import json
from pathlib import Path

import mlflow
import numpy as np
import pytest
import tensorflow as tf
from gpu_job.checkpoints import BACKUP_KIND, check_backup_kind
from mlflow.tracking import MlflowClient

from {{ cookiecutter.package_name }} import pruning
from {{ cookiecutter.package_name }}.config import ConfigError, PruningConfig, config_from_dict
from {{ cookiecutter.package_name }}.data import load_splits
from {{ cookiecutter.package_name }}.errors import DataError
from {{ cookiecutter.package_name }}.export import SavedModelPredictor, TFLitePredictor
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.runtime import plan_runtime
from {{ cookiecutter.package_name }}.train import train

# Short enough for the slow tier, long enough to reach the target: 6 epochs, the schedule over the first 4.
EPOCHS, END_EPOCH, TARGET = 6, 4, 0.6
PRUNED = {"enabled": True, "final_sparsity": TARGET, "end_epoch": END_EPOCH}


def _config(tmp: Path, name: str, prune: bool = True, **export: object) -> dict:
    return {
        "training": {"epochs": EPOCHS, "checkpoint_dir": str(tmp / "ckpt")},
        "export": {"output_dir": str(tmp / "out"), **export},
        "pruning": {**PRUNED, "enabled": prune},
        "tracking": {"experiment_name": name, "log_system_metrics": False},
        "registry": {"enabled": False},
    }


@pytest.fixture
def local_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # The local store puts artifacts under ./mlruns of the working directory: there, not in the project.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    return uri


# --- configuration and schedule (no training) ---------------------------------------------------------------


def test_pruning_is_off_by_default_and_keeps_its_own_checkpoint_prefix() -> None:
    assert config_from_dict({}).pruning.enabled is False
    off, on = config_from_dict({}), config_from_dict({"pruning": {"enabled": True}})
    assert off.trajectory()["pruning"] != on.trajectory()["pruning"]


@pytest.mark.parametrize(
    ("pruning_raw", "message"),
    [
        ({"final_sparsity": 1.0}, r"pruning\.final_sparsity: must be in \(0, 1\).*e\.g\. 0\.5 \(got 1\.0\)"),
        ({"final_sparsity": 0}, r"pruning\.final_sparsity: must be in \(0, 1\)"),
        ({"initial_sparsity": -0.1}, r"pruning\.initial_sparsity: must be in \[0, 1\)"),
        (
            {"initial_sparsity": 0.6},
            r"pruning\.final_sparsity: must be above pruning\.initial_sparsity \(0\.6\)",
        ),
        ({"begin_epoch": 12}, r"pruning\.end_epoch: must be above pruning\.begin_epoch \(12\): .*\(got 10\)"),
        ({"frequency_steps": 0}, r"pruning\.frequency_steps: Input should be greater than 0"),
        ({"final_sparsty": 0.5}, r"pruning\.final_sparsty: unknown key"),
    ],
)
def test_a_bad_pruning_field_is_named_with_the_fix(pruning_raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"pruning": pruning_raw}, "configs/train.yaml")


def test_the_schedule_must_end_within_the_training_but_only_when_on() -> None:
    with pytest.raises(
        ConfigError, match=r"pruning\.end_epoch \(10\) must not exceed training\.epochs \(5\)"
    ):
        config_from_dict({"training": {"epochs": 5}, "pruning": {"enabled": True}})
    assert config_from_dict({"training": {"epochs": 5}}).pruning.end_epoch == 10


def test_pruning_plans_the_runtime_without_mixed_precision() -> None:
    pruned = config_from_dict({"training": {"epochs": 10}, "pruning": {"enabled": True}})
    assert pruned.training.mixed_precision is True  # the default, for a GPU
    assert pruning.runtime_training(pruned).mixed_precision is False
    assert plan_runtime(1, pruning.runtime_training(pruned)).mixed_precision is False
    assert plan_runtime(1, pruning.runtime_training(config_from_dict({}))).mixed_precision is True


def test_the_end_step_lands_on_a_mask_update() -> None:
    # 1,257 training images of the digits in batches of 64: 20 steps per epoch.
    assert pruning.steps_per_epoch(1257, 64) == 20
    steps = pruning.schedule(PruningConfig(begin_epoch=1, end_epoch=4, frequency_steps=7), 20)
    assert (steps.begin_step, steps.frequency) == (20, 7)
    assert steps.end_step == 76 and (steps.end_step - steps.begin_step) % steps.frequency == 0
    # A frequency longer than the whole schedule would never update the mask after the first step.
    assert pruning.schedule(PruningConfig(end_epoch=1, frequency_steps=100), 20).frequency == 20


def test_a_backup_of_the_other_kind_is_refused_with_the_way_out(tmp_path: Path) -> None:
    (tmp_path / "chief").mkdir()
    (tmp_path / "chief" / "checkpoint").write_text("a backup of an unpruned fit (no marker: before pruning)")
    check_backup_kind(tmp_path, pruned=False)
    assert json.loads((tmp_path / BACKUP_KIND).read_text()) == {"pruned": False}
    with pytest.raises(
        DataError, match=r"pruning\.enabled: false, and this config has pruning\.enabled: true"
    ):
        check_backup_kind(tmp_path, pruned=True)
    # Once that training finished (Keras deletes chief/), the folder is free for either kind.
    (tmp_path / "chief" / "checkpoint").unlink()
    check_backup_kind(tmp_path, pruned=True)
    assert json.loads((tmp_path / BACKUP_KIND).read_text()) == {"pruned": True}


@pytest.mark.slow
def test_strip_removes_every_wrapper_and_keeps_the_weights() -> None:
    cfg = config_from_dict({})
    model = build_model((8, 8, 1), 10, cfg.model)
    wrapped = pruning.wrap(model, PruningConfig(enabled=True), 20)
    # tfmot wraps every layer but the input; only those with a kernel have weights to prune.
    assert pruning.wrapped_layers(wrapped) == [
        f"prune_low_magnitude_{layer.name}" for layer in model.layers[1:]
    ]
    assert [layer.layer.name for layer in wrapped.layers[1:] if hasattr(layer.layer, "kernel")] == [
        "conv0", "conv1", "dense", "probabilities",
    ]  # fmt: skip
    stripped = pruning.strip(wrapped)
    assert pruning.wrapped_layers(stripped) == []
    assert [layer.name for layer in stripped.layers] == [layer.name for layer in model.layers]
    images = np.random.default_rng(0).random((4, 8, 8, 1), dtype=np.float32)
    np.testing.assert_allclose(stripped(images), wrapped(images), atol=1e-6)


# --- a real pruned training --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pruned_run(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("pruned")
    cfg = config_from_dict(_config(tmp, "pruned"))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp)  # the local store's ./mlruns (local_mlflow)
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        patch.setenv("GITHUB_STEP_SUMMARY", str(tmp / "summary.md"))
        result = train(cfg)
        run = MlflowClient().get_run(result.run_id)
        logged = mlflow.tensorflow.load_model(f"runs:/{result.run_id}/model")
    return cfg, result, run, logged, tmp


@pytest.mark.slow
def test_the_exported_model_reaches_the_target_sparsity(pruned_run) -> None:
    _, result, run, _, tmp = pruned_run
    # The mask keeps round(size * sparsity) weights per kernel: the whole model lands within a hair of the target.
    assert result.metrics["export.sparsity"] == pytest.approx(TARGET, abs=0.01)
    assert run.data.metrics["export.sparsity"] == result.metrics["export.sparsity"]
    # Every pruned kernel of the SavedModel on disk, one by one (biases are never pruned).
    loaded = tf.saved_model.load(str(tmp / "out" / "saved_model"))
    kernels = {v.name: v.numpy() for v in loaded.variables if v.name.split("/")[-1].startswith("kernel")}
    assert sorted(kernels) == [f"{n}/kernel:0" for n in ("conv0", "conv1", "dense", "probabilities")]
    for name, kernel in kernels.items():
        assert np.mean(kernel == 0) == pytest.approx(TARGET, abs=0.01), name
    # Pruned, and still far above chance (0.1) on the test set.
    assert result.metrics["test_accuracy"] > 0.85


@pytest.mark.slow
def test_the_run_records_the_schedule(pruned_run) -> None:
    _, _, run, _, _ = pruned_run
    params = run.data.params
    assert (params["pruning.enabled"], params["pruning.final_sparsity"]) == ("True", str(TARGET))
    assert params["pruning.end_epoch"] == str(END_EPOCH)
    # 20 steps per epoch (test_the_end_step_lands_on_a_mask_update): 4 epochs, a mask update every 10 steps.
    assert (params["pruning.schedule_begin_step"], params["pruning.schedule_end_step"]) == ("0", "80")
    assert params["pruning.schedule_frequency"] == "10"
    # Early stopping waited for the end of the schedule: the run trained on to its last epoch.
    assert run.data.metrics["epochs_run"] == EPOCHS


@pytest.mark.slow
def test_every_export_is_made_from_the_stripped_model_and_agrees(pruned_run) -> None:
    cfg, result, _, logged, tmp = pruned_run
    # The logged MLflow model loads without tfmot's wrappers and holds the zeros.
    assert pruning.wrapped_layers(logged) == []
    assert pruning.kernel_sparsity(logged.weights) == pytest.approx(result.metrics["export.sparsity"])
    for name in ("saved_model", "tflite", "tflite_int8"):
        assert result.metrics[f"{name}_agreement"] >= cfg.export.tflite_min_agreement, name
    splits = load_splits(cfg.data, cfg.training.seed)
    keras_pred = np.argmax(logged.predict(splits.x_test, verbose=0), axis=-1)
    out = tmp / "out"
    for predictor in (
        SavedModelPredictor(out / "saved_model"),
        TFLitePredictor(out / "model.tflite"),
        TFLitePredictor(out / "model_int8.tflite"),
    ):
        assert np.mean(np.argmax(predictor(splits.x_test), axis=-1) == keras_pred) >= 0.95


# --- killed and resumed ------------------------------------------------------------------------------------


class _DieAfter(tf.keras.callbacks.Callback):
    """Raises once `epochs` epochs are backed up (BackupAndRestore runs first): a training killed mid-schedule."""

    def __init__(self, epochs: int) -> None:
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if epoch + 1 == self.epochs:
            raise RuntimeError("killed")


class _FirstBatch(tf.keras.callbacks.Callback):
    """What the wrappers hold when the resumed fit's first batch starts (after the restore and UpdatePruningStep)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, tuple[int, float]] = {}

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if not self.seen:
            for layer in self.model.layers:
                if hasattr(getattr(layer, "layer", None), "kernel") and hasattr(layer, "pruning_step"):
                    kernel = layer.layer.kernel.numpy()
                    self.seen[layer.name] = (int(layer.pruning_step.numpy()), float(np.mean(kernel == 0)))


@pytest.mark.slow
def test_a_killed_pruned_training_resumes_its_schedule(local_mlflow: str, tmp_path: Path) -> None:
    raw = _config(tmp_path, "resume", tflite=False, tflite_int8=False)
    raw["tracking"]["log_model"] = False
    done = 2
    with pytest.raises(RuntimeError, match="killed"):
        train(config_from_dict(raw), callbacks=[_DieAfter(done)])

    # The same folder with pruning switched off is refused before anything trains.
    with pytest.raises(
        DataError, match=r"holds the backup of an unfinished training with pruning\.enabled: true"
    ):
        train(config_from_dict(_config(tmp_path, "resume", prune=False)))

    first_batch = _FirstBatch()
    resumed = train(config_from_dict(raw), callbacks=[first_batch])
    # Restored, not restarted: every wrapper continues at the step the backup holds, with its masks applied
    # (sparsity part-way along the schedule, which is 0 at step 0).
    per_epoch = pruning.steps_per_epoch(len(load_splits(config_from_dict(raw).data, 42).y_train), 64)
    assert len(first_batch.seen) == 4
    for name, (step, sparsity) in first_batch.seen.items():
        assert step == done * per_epoch, name
        assert 0.2 < sparsity < TARGET, name
    # Only the epochs after the backup ran, and the schedule still reached its end.
    assert resumed.epochs_run == EPOCHS - done
    assert resumed.metrics["export.sparsity"] == pytest.approx(TARGET, abs=0.01)
