"""configs/sweep.yaml against this project's training config and its search rules (sweep_project.py): the
shipped files agree, the rules name real fields, and a sweep that the project's own config refuses fails with
the sweep field named. The sweep file's schema itself is the platform's (gpu_job.sweep.space, tested there)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from gpu_job.errors import SweepConfigError
from gpu_job.sweep.space import SweepConfig, check_runner_attempts, load_sweep_config, validate_sweep

from {{ cookiecutter.package_name }}.config import HEADLINE_METRICS, Config, load_config
from {{ cookiecutter.package_name }}.sweep_project import SEARCH_RULES

PROJECT = Path(__file__).resolve().parent.parent
BASE = Config()


def shipped() -> tuple[Config, SweepConfig]:
    base = load_config(PROJECT / "configs" / "train.yaml")
    return base, load_sweep_config(PROJECT / "configs" / "sweep.yaml", base, SEARCH_RULES)


def test_the_shipped_sweep_validates_against_the_shipped_training_config() -> None:
    base, cfg = shipped()
    assert cfg.parallel >= 1 and cfg.trials >= cfg.parallel
    assert set(cfg.space) <= {
        f"{s}.{k}" for s in SEARCH_RULES.sections for k in type(getattr(base, s)).model_fields
    }


def test_the_shipped_sweep_fits_the_shipped_runners_attempts() -> None:
    """A trial's k-th wave launches with attempt k; the runner's launch refuses k above its max_attempts."""
    _, cfg = shipped()
    runner = yaml.safe_load((PROJECT / "configs" / "gpu-runner.yaml").read_text(encoding="utf-8"))
    check_runner_attempts(cfg, runner["max_attempts"])


def test_the_sweep_file_holds_only_sweep_fields() -> None:
    raw = yaml.safe_load((PROJECT / "configs" / "sweep.yaml").read_text(encoding="utf-8"))
    assert set(raw) <= set(SweepConfig.model_fields)


def test_the_rules_name_real_fields_and_every_headline_metric() -> None:
    # A rule about a renamed field would silently protect nothing.
    for path in SEARCH_RULES.not_searchable:
        section, key = path.split(".")
        assert section in SEARCH_RULES.sections and key in type(getattr(BASE, section)).model_fields, path
    for path in (SEARCH_RULES.epochs, SEARCH_RULES.checkpoint_uri, SEARCH_RULES.checkpoint_dir):
        section, key = path.split(".")
        assert key in type(getattr(BASE, section)).model_fields, path
    assert list(SEARCH_RULES.run_metrics) == list(HEADLINE_METRICS)
    smaller = {m for m, way in SEARCH_RULES.run_metrics.items() if way == "minimize"}
    assert smaller == {
        "best_val_loss",
        *(m for m in HEADLINE_METRICS if m.endswith(("_size_bytes", "_latency_ms"))),
    }


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {"space": {"model.dropout": {"type": "float", "low": 0.1, "high": 1.0}}},
            "space.model.dropout.low/high: 1.0 is refused by the training config: model.dropout: Input should be "
            "less than 1",
            id="bound-beyond-the-field",
        ),
        pytest.param(
            {"space": {"model.filters": {"type": "categorical", "choices": [[16], []]}}},
            "space.model.filters.choices: [] is refused by the training config: model.filters: needs at least "
            "one convolution block",
            id="choice-refused",
        ),
        pytest.param(
            {"space": {"training.watch_interruptions": {"type": "categorical", "choices": [True, False]}}},
            "'training.watch_interruptions' cannot be searched: how the run is watched, not what is trained",
            id="not-a-hyperparameter",
        ),
        pytest.param(
            {"space": {"registry.metric": {"type": "categorical", "choices": ["test_accuracy"]}}},
            "section 'registry' cannot be searched; use one of data, model, training",
            id="results-section",
        ),
        pytest.param(
            {"objective": {"metric": "tflite_latency_ms", "direction": "maximize"}},
            "objective.direction: tflite_latency_ms is better when smaller; set direction: minimize",
            id="latency-is-minimised",
        ),
    ],
)
def test_the_projects_config_and_rules_refuse_a_sweep_naming_its_field(fields: dict, expected: str) -> None:
    raw = {
        "study_name": "s",
        "space": {"training.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2}},
    }
    with pytest.raises(SweepConfigError) as caught:
        validate_sweep({**raw, **fields}, BASE, SEARCH_RULES, "sweep.yaml")
    assert expected in str(caught.value)


def test_sweep_check_refuses_trial_attempts_the_runner_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sweep.yml's plan job passes the settings' max-attempts to `sweep check`, before any credential."""
    from {{ cookiecutter.package_name }}.cli import main

    monkeypatch.chdir(PROJECT)
    output = tmp_path / "out"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    assert main(["sweep", "check", "--max-attempts=1"]) == 2
    assert "budget.max_attempts_per_trial: 2 is more than max_attempts (1)" in capsys.readouterr().err
    assert not output.exists()  # no `parallel` output: the plan job stops here
    assert main(["sweep", "check", "--max-attempts=2"]) == 0
    assert output.read_text() == "parallel=2\n"
