"""configs/sweep.yaml: every field checked against the training config before anything is launched, with the
sweep field named in the message; the shipped file validates against the shipped training config."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from {{ cookiecutter.package_name }}.config import Config, load_config
from {{ cookiecutter.package_name }}.sweep_config import (
    NOT_SEARCHABLE,
    SweepConfigError,
    check_runner_attempts,
    decode_choice,
    grid_values,
    load_sweep_config,
    trial_config,
    validate_sweep,
)
from {{ cookiecutter.package_name }}.sweep_study import distributions, space_changes

PROJECT = Path(__file__).resolve().parent.parent
BASE = Config()


def sweep(**fields: object) -> dict:
    raw = {
        "study_name": "s",
        "space": {"training.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2}},
    }
    raw.update(fields)
    return raw


def error_of(raw: dict) -> str:
    with pytest.raises(SweepConfigError) as caught:
        validate_sweep(raw, BASE, "sweep.yaml")
    return str(caught.value)


def test_the_shipped_sweep_validates_against_the_shipped_training_config() -> None:
    base = load_config(PROJECT / "configs" / "train.yaml")
    cfg = load_sweep_config(PROJECT / "configs" / "sweep.yaml", base)
    assert cfg.parallel >= 1 and cfg.trials >= cfg.parallel
    # Every searched path is a field the training config has, and Optuna accepts each distribution.
    for path, dist in distributions(cfg).items():
        section, key = path.split(".")
        assert key in type(getattr(base, section)).model_fields
        optuna.distributions.check_distribution_compatibility(dist, dist)


def test_the_shipped_sweep_fits_the_shipped_runners_attempts() -> None:
    """A trial's k-th wave launches with attempt k; the runner's launch refuses k above its max_attempts."""
    base = load_config(PROJECT / "configs" / "train.yaml")
    cfg = load_sweep_config(PROJECT / "configs" / "sweep.yaml", base)
    runner = yaml.safe_load((PROJECT / "configs" / "gpu-runner.yaml").read_text(encoding="utf-8"))
    check_runner_attempts(cfg, runner["max_attempts"])
    assert cfg.budget.max_attempts_per_trial <= runner["max_attempts"]


def test_more_trial_attempts_than_the_runner_allows_is_refused_naming_both_fields() -> None:
    cfg = validate_sweep(sweep(budget={"max_attempts_per_trial": 4}), BASE, "sweep.yaml")
    check_runner_attempts(cfg, 4)  # equal fits: wave 4 launches attempt 4
    with pytest.raises(SweepConfigError) as caught:
        check_runner_attempts(cfg, 3, "sweep.yaml")
    assert str(caught.value) == (
        "sweep.yaml: budget.max_attempts_per_trial: 4 is more than max_attempts (3) in configs/gpu-runner.yaml, "
        "so a trial's wave 4 could not launch its runner; set budget.max_attempts_per_trial to at most 3 or "
        "raise max_attempts"
    )


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        pytest.param(
            {"training.learning_rat": {"type": "float", "low": 0.1, "high": 0.2}},
            "space.training.learning_rat: 'training' has no field 'learning_rat' (unknown or mistyped); its fields:",
            id="mistyped-field",
        ),
        pytest.param(
            {"trainig.learning_rate": {"type": "float", "low": 0.1, "high": 0.2}},
            "space.trainig.learning_rate: section 'trainig' cannot be searched; use one of data, model, training",
            id="mistyped-section",
        ),
        pytest.param(
            {"learning_rate": {"type": "float", "low": 0.1, "high": 0.2}},
            "space.learning_rate: 'learning_rate' is not a dotted path <section>.<field>",
            id="no-section",
        ),
        pytest.param(
            {"tracking.run_name": {"type": "categorical", "choices": ["a"]}},
            "section 'tracking' cannot be searched",
            id="results-section",
        ),
        pytest.param(
            {"model.dropout": {"type": "float", "low": 0.4, "high": 0.1}},
            "space.model.dropout: empty range (low 0.4 is not below high 0.1); give low < high",
            id="empty-range",
        ),
        pytest.param(
            {"model.dropout": {"type": "float", "low": 0.3, "high": 0.3}},
            "space.model.dropout: empty range (low 0.3 is not below high 0.3)",
            id="point-range",
        ),
        pytest.param(
            {"model.dropout": {"type": "float", "low": 0.1, "high": 1.0}},
            "space.model.dropout.low/high: 1.0 is refused by the training config: model.dropout: Input should be "
            "less than 1",
            id="bound-beyond-the-field",
        ),
        pytest.param(
            {"training.batch_size": {"type": "int", "low": 0, "high": 64}},
            "space.training.batch_size.low/high: 0 is refused by the training config: training.batch_size: "
            "Input should be greater than 0",
            id="int-bound-beyond-the-field",
        ),
        pytest.param(
            {"training.batch_size": {"type": "float", "low": 16, "high": 64}},
            "space.training.batch_size.type: training.batch_size is an integer field; use type: int",
            id="float-range-on-an-int-field",
        ),
        pytest.param(
            {"model.filters": {"type": "int", "low": 16, "high": 64}},
            "space.model.filters.type: 'int' needs a numeric field, and model.filters is not one",
            id="range-on-a-list-field",
        ),
        pytest.param(
            {"training.learning_rate": {"type": "float", "low": 0.0, "high": 0.1, "log": True}},
            "space.training.learning_rate.low: a log range needs low > 0 (got 0.0)",
            id="log-from-zero",
        ),
        pytest.param(
            {"model.filters": {"type": "categorical", "choices": [[16], []]}},
            "space.model.filters.choices: [] is refused by the training config: model.filters: needs at least "
            "one convolution block",
            id="choice-refused",
        ),
        pytest.param(
            {"model.dense_units": {"type": "categorical", "choices": [32, 32]}},
            "space.model.dense_units.choices: repeats a value; list each choice once",
            id="repeated-choice",
        ),
        pytest.param(
            {"training.epochs": {"type": "int", "low": 1, "high": 9}},
            "space.training.epochs: 'training.epochs' cannot be searched: set by budget.epochs_per_trial",
            id="epochs-belong-to-the-budget",
        ),
        pytest.param(
            {"model.dropout": {"type": "uniform", "low": 0.1, "high": 0.2}},
            "space.model.dropout.type: must be float, int or categorical (got 'uniform')",
            id="unknown-type",
        ),
        pytest.param(
            {"model.dropout": {"type": "float", "low": 0.1, "hi": 0.2}},
            "space.model.dropout.hi: unknown key (remove it or fix its spelling)",
            id="unknown-key-in-a-range",
        ),
    ],
)
def test_a_bad_search_space_names_its_field(space: dict, expected: str) -> None:
    assert expected in error_of(sweep(space=space))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param(
            {"parallel": 0}, "parallel: Input should be greater than or equal to 1 (got 0)", id="parallel-0"
        ),
        pytest.param({"trials": 0}, "trials: Input should be greater than 0 (got 0)", id="trials-0"),
        pytest.param({"space": {}}, "space: Dictionary should have at least 1 item", id="empty-space"),
        pytest.param(
            {"study_name": "a b/c"}, "study_name: must start with a letter or digit", id="study-name"
        ),
        pytest.param(
            {"budget": {"usd": 0}}, "budget.usd: Input should be greater than 0 (got 0)", id="usd-0"
        ),
        pytest.param(
            {"sampler": {"name": "cmaes"}},
            "sampler.name: Input should be 'tpe', 'random' or 'grid'",
            id="sampler",
        ),
        pytest.param(
            {"pruner": {"name": "patient"}}, "pruner.name: Input should be 'none', 'median',", id="pruner"
        ),
        pytest.param({"trails": 4}, "trails: unknown key (remove it or fix its spelling)", id="typo"),
        pytest.param(
            {"objective": {"metric": "f1"}},
            "objective.metric: 'f1' is not a metric train logs; use one of test_accuracy,",
            id="unknown-metric",
        ),
        pytest.param(
            {"objective": {"metric": "best_val_loss", "direction": "maximize"}},
            "objective.direction: best_val_loss is better when smaller; set direction: minimize",
            id="metric-direction",
        ),
        pytest.param(
            {"objective": {"metric": "test_accuracy", "intermediate": "val_loss"}},
            "objective.intermediate: val_loss improves the other way than direction maximize; the pruner would "
            "keep the worst trials. Use val_accuracy",
            id="intermediate-direction",
        ),
        pytest.param(
            {"objective": {"intermediate": "val_f1"}},
            "objective.intermediate: 'val_f1' is not logged per epoch",
            id="intermediate-unknown",
        ),
        pytest.param(
            {"sampler": {"name": "grid"}},
            "space.training.learning_rate: the grid sampler needs a finite dimension: give this float range a step",
            id="grid-continuous",
        ),
        pytest.param(
            {
                "sampler": {"name": "grid"},
                "trials": 5,
                "space": {"model.dense_units": {"type": "int", "low": 32, "high": 64, "step": 16}},
            },
            "trials: 5 is more than the grid's 3 points; set trials: 3 or widen space",
            id="grid-too-small",
        ),
    ],
)
def test_a_bad_sweep_field_is_named(fields: dict, expected: str) -> None:
    assert expected in error_of(sweep(**fields))


def test_every_problem_is_listed_at_once() -> None:
    message = error_of(
        sweep(
            space={
                "model.dropout": {"type": "float", "low": 0.4, "high": 0.1},
                "model.dense_unit": {"type": "int", "low": 8, "high": 16},
            },
            objective={"metric": "f1"},
        )
    )
    assert message.startswith("sweep.yaml: 3 invalid field(s)")
    assert "space.model.dropout: empty range" in message
    assert "space.model.dense_unit:" in message and "objective.metric:" in message


def test_not_searchable_paths_are_real_fields() -> None:
    # The list would silently protect nothing if a field were renamed.
    for path in NOT_SEARCHABLE:
        section, key = path.split(".")
        assert key in type(getattr(BASE, section)).model_fields, path


def test_a_trial_config_applies_the_params_the_epoch_budget_and_its_own_checkpoint() -> None:
    cfg = validate_sweep(
        sweep(
            space={
                "model.filters": {"type": "categorical", "choices": [[16, 32], [8]]},
                "training.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            },
            budget={"epochs_per_trial": 3},
        ),
        BASE,
    )
    sampled = {"model.filters": "[16, 32]", "training.learning_rate": 0.003}
    trained = trial_config(BASE, cfg, sampled, "s3://bucket/checkpoints/sweeps/s/trial-4")
    assert trained.model.filters == (16, 32)
    assert trained.training.learning_rate == 0.003
    assert trained.training.epochs == 3
    assert trained.training.checkpoint_uri == "s3://bucket/checkpoints/sweeps/s/trial-4"
    # Everything else is the base config's.
    assert trained.data == BASE.data and trained.registry == BASE.registry


def test_list_choices_round_trip_through_optuna() -> None:
    cfg = validate_sweep(
        sweep(space={"model.filters": {"type": "categorical", "choices": [[16, 32], [8]]}}), BASE
    )
    dist = distributions(cfg)["model.filters"]
    assert dist.choices == ("[16, 32]", "[8]")
    assert [decode_choice(c) for c in dist.choices] == [[16, 32], [8]]


def test_grid_values_cover_the_range() -> None:
    cfg = validate_sweep(
        sweep(
            sampler={"name": "grid"},
            trials=6,
            space={
                "model.dense_units": {"type": "int", "low": 32, "high": 96, "step": 32},
                "model.dropout": {"type": "float", "low": 0.1, "high": 0.3, "step": 0.1},
            },
        ),
        BASE,
    )
    assert grid_values(cfg.space["model.dense_units"]) == [32, 64, 96]
    assert grid_values(cfg.space["model.dropout"]) == [0.1, 0.2, 0.3]


def test_space_changes_name_each_path() -> None:
    old = {"model.dropout": {"type": "float", "low": 0.0, "high": 0.5}, "model.dense_units": {"type": "int"}}
    new = {"model.dropout": {"type": "float", "low": 0.0, "high": 0.4}, "training.seed": {"type": "int"}}
    lines = space_changes(old, new)
    assert lines[0].startswith("space.model.dense_units: removed")
    assert lines[1].startswith("space.model.dropout: changed from")
    assert lines[2] == "space.training.seed: added (the study was started without it)"


def test_the_sweep_file_is_yaml_a_user_can_read() -> None:
    raw = yaml.safe_load((PROJECT / "configs" / "sweep.yaml").read_text())
    assert set(raw) <= {
        "study_name",
        "objective",
        "space",
        "sampler",
        "pruner",
        "trials",
        "parallel",
        "budget",
    }


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
