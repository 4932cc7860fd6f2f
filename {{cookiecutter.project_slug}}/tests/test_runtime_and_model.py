import pytest
import tensorflow as tf

from {{ cookiecutter.package_name }}.config import ModelConfig, TrainingConfig
from {{ cookiecutter.package_name }}.errors import NoGpuError
from {{ cookiecutter.package_name }}.model import build_model
from {{ cookiecutter.package_name }}.runtime import configure, plan_runtime, require_gpu_on_gpu_runner


@pytest.mark.parametrize(
    ("gpus", "allow", "mixed", "xla", "multi"),
    [
        (0, True, False, False, False),
        (1, True, True, True, False),
        (1, False, False, False, False),
        (2, True, True, True, True),
        (4, False, False, False, True),
    ],
)
def test_plan_uses_gpu_features_only_with_a_gpu_and_permission(
    gpus: int, allow: bool, mixed: bool, xla: bool, multi: bool
) -> None:
    plan = plan_runtime(gpus, TrainingConfig(mixed_precision=allow, xla=allow))
    assert (plan.mixed_precision, plan.xla, plan.multi_gpu) == (mixed, xla, multi)
    assert plan.describe()["runtime.strategy"] == ("MirroredStrategy" if multi else "default")


def test_configure_on_this_cpu_machine_keeps_float32() -> None:
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    plan, strategy = configure(TrainingConfig())
    assert plan.gpus == len(tf.config.list_physical_devices("GPU"))
    if plan.gpus == 0:
        assert tf.keras.mixed_precision.global_policy().name == "float32"
        assert not isinstance(strategy, tf.distribute.MirroredStrategy)


@pytest.mark.parametrize(("shape", "classes"), [((8, 8, 1), 10), ((32, 32, 3), 4), ((2, 2, 1), 2)])
def test_model_outputs_one_probability_per_class(shape: tuple[int, int, int], classes: int) -> None:
    model = build_model(shape, classes, ModelConfig())
    out = model(tf.zeros((3, *shape)))
    assert out.shape == (3, classes)
    assert out.dtype == tf.float32
    assert tf.reduce_all(tf.abs(tf.reduce_sum(out, axis=-1) - 1.0) < 1e-4)


def test_no_gpu_on_the_gpu_runner_stops_before_training() -> None:
    # The guard behind the preflight step: train.yml sets GPU_INSTANCE_TYPE on the GPU runner.
    on_runner = {"GPU_INSTANCE_TYPE": "g5.xlarge"}
    with pytest.raises(NoGpuError, match=r"no GPU visible to TensorFlow on the GPU runner \(g5.xlarge\)"):
        require_gpu_on_gpu_runner(0, TrainingConfig(), on_runner)
    require_gpu_on_gpu_runner(1, TrainingConfig(), on_runner)
    require_gpu_on_gpu_runner(0, TrainingConfig(allow_cpu=True), on_runner)
    require_gpu_on_gpu_runner(0, TrainingConfig(), {**on_runner, "GPU_ALLOW_CPU": "true"})
    require_gpu_on_gpu_runner(0, TrainingConfig(), {})  # a laptop or CI: CPU is the point


def test_train_cli_refuses_cpu_on_the_gpu_runner(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from {{ cookiecutter.package_name }}.cli import main

    (tmp_path / "train.yaml").write_text("")
    monkeypatch.setenv("GPU_INSTANCE_TYPE", "g4dn.xlarge")
    monkeypatch.delenv("GPU_ALLOW_CPU", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert main(["train", "--config", str(tmp_path / "train.yaml")]) == 78
    assert not (tmp_path / "mlflow.db").exists()  # stopped before any MLflow run
