"""The sweep file's schema (gpu_job.sweep.space) against a project's training config: every field is checked
before anything is launched, with the sweep field named in the message and every problem listed at once. The
project here is the toy one (toy_project.py): a strict pydantic config of sections, as a generated project's."""

from __future__ import annotations

import optuna
import pytest

from gpu_job.errors import SweepConfigError
from gpu_job.sweep.space import (
    check_runner_attempts,
    decode_choice,
    grid_values,
    read_sweep,
    trial_config,
    validate_sweep,
)
from gpu_job.sweep.study import distributions, space_changes

from .toy_project import RULES, ToyConfig

BASE = ToyConfig()


def sweep(**fields: object) -> dict:
    raw = {
        "study_name": "s",
        "space": {"training.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2}},
    }
    raw.update(fields)
    return raw


def error_of(raw: dict) -> str:
    with pytest.raises(SweepConfigError) as caught:
        validate_sweep(raw, BASE, RULES, "sweep.yaml")
    return str(caught.value)


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
            {"tracking.experiment_name": {"type": "categorical", "choices": ["a"]}},
            "section 'tracking' cannot be searched",
            id="results-section",
        ),
        pytest.param(
            {"model.l2": {"type": "float", "low": 0.4, "high": 0.1}},
            "space.model.l2: empty range (low 0.4 is not below high 0.1); give low < high",
            id="empty-range",
        ),
        pytest.param(
            {"model.l2": {"type": "float", "low": 0.3, "high": 0.3}},
            "space.model.l2: empty range (low 0.3 is not below high 0.3)",
            id="point-range",
        ),
        pytest.param(
            {"model.l2": {"type": "float", "low": 0.1, "high": 1.0}},
            "space.model.l2.low/high: 1.0 is refused by the training config: model.l2: Input should be less than 1",
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
            {"model.powers": {"type": "int", "low": 1, "high": 3}},
            "space.model.powers.type: 'int' needs a numeric field, and model.powers is not one",
            id="range-on-a-list-field",
        ),
        pytest.param(
            {"training.learning_rate": {"type": "float", "low": 0.0, "high": 0.1, "log": True}},
            "space.training.learning_rate.low: a log range needs low > 0 (got 0.0)",
            id="log-from-zero",
        ),
        pytest.param(
            {
                "training.learning_rate": {
                    "type": "float",
                    "low": 0.01,
                    "high": 0.1,
                    "log": True,
                    "step": 0.01,
                }
            },
            "space.training.learning_rate: Optuna samples a log range without a step; remove step or log",
            id="log-with-a-step",
        ),
        pytest.param(
            {"model.powers": {"type": "categorical", "choices": [[1], []]}},
            "space.model.powers.choices: [] is refused by the training config: model.powers: needs at least one power",
            id="choice-refused",
        ),
        pytest.param(
            {"training.batch_size": {"type": "categorical", "choices": [32, 32]}},
            "space.training.batch_size.choices: repeats a value; list each choice once",
            id="repeated-choice",
        ),
        pytest.param(
            {"training.epochs": {"type": "int", "low": 1, "high": 9}},
            "space.training.epochs: 'training.epochs' cannot be searched: set by budget.epochs_per_trial",
            id="epochs-belong-to-the-budget",
        ),
        pytest.param(
            {"model.l2": {"type": "uniform", "low": 0.1, "high": 0.2}},
            "space.model.l2.type: must be one of float, int, categorical (got 'uniform')",
            id="unknown-type",
        ),
        pytest.param(
            {"model.l2": {"type": "float", "low": 0.1, "hi": 0.2}},
            "space.model.l2.hi: unknown key (remove it or fix its spelling)",
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
        pytest.param(
            {"parallel": 33}, "parallel: Input should be less than or equal to 32 (got 33)", id="parallel-33"
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
            "objective.metric: 'f1' is not a metric train logs; use one of test_accuracy, best_val_accuracy, best_val_loss",
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
            "keep the worst trials. Use val_accuracy or accuracy",
            id="intermediate-direction",
        ),
        pytest.param(
            {"objective": {"intermediate": "val_f1"}},
            "objective.intermediate: 'val_f1' is not logged per epoch; use one of val_accuracy, val_loss",
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
                "space": {"training.batch_size": {"type": "int", "low": 32, "high": 64, "step": 16}},
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
                "model.l2": {"type": "float", "low": 0.4, "high": 0.1},
                "model.l3": {"type": "int", "low": 8, "high": 16},
            },
            objective={"metric": "f1"},
        )
    )
    assert message.startswith("sweep.yaml: 3 invalid field(s)\n  space.model.l2: empty range")
    assert "\n  space.model.l3: 'model' has no field 'l3'" in message and "\n  objective.metric:" in message


def test_the_default_intermediate_metric_improves_in_the_objectives_direction() -> None:
    maximize = validate_sweep(sweep(), BASE, RULES)
    minimize = validate_sweep(
        sweep(objective={"metric": "best_val_loss", "direction": "minimize"}), BASE, RULES
    )
    assert (maximize.intermediate_metric(RULES), minimize.intermediate_metric(RULES)) == (
        "val_accuracy",
        "val_loss",
    )


def test_more_trial_attempts_than_the_runner_allows_is_refused_naming_both_fields() -> None:
    cfg = validate_sweep(sweep(budget={"max_attempts_per_trial": 4}), BASE, RULES)
    check_runner_attempts(cfg, 4)  # equal fits: wave 4 launches attempt 4
    with pytest.raises(SweepConfigError) as caught:
        check_runner_attempts(cfg, 3, "sweep.yaml")
    assert str(caught.value) == (
        "sweep.yaml: budget.max_attempts_per_trial: 4 is more than max_attempts (3) in configs/gpu-runner.yaml, "
        "so a trial's wave 4 could not launch its runner; set budget.max_attempts_per_trial to at most 3 or "
        "raise max_attempts"
    )


def test_a_trial_config_applies_the_params_the_epoch_budget_and_its_checkpoint_root() -> None:
    cfg = validate_sweep(
        sweep(
            space={
                "model.powers": {"type": "categorical", "choices": [[1, 3], [2]]},
                "training.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            },
            budget={"epochs_per_trial": 3},
        ),
        BASE,
        RULES,
    )
    sampled = {"model.powers": "[1, 3]", "training.learning_rate": 0.003}
    trained = trial_config(BASE, RULES, cfg, sampled, "s3://bucket/checkpoints")
    assert isinstance(trained, ToyConfig)
    assert (trained.model.powers, trained.training.learning_rate) == ((1, 3), 0.003)
    assert (trained.training.epochs, trained.training.checkpoint_uri) == (3, "s3://bucket/checkpoints")
    # Everything else is the base config's.
    assert trained.data == BASE.data and trained.registry == BASE.registry
    with pytest.raises(
        SweepConfigError, match=r"sampled params .* are refused by the training config: model.l2"
    ):
        trial_config(BASE, RULES, cfg, {"model.l2": 2.0}, "")


def test_list_choices_round_trip_through_optuna() -> None:
    cfg = validate_sweep(
        sweep(space={"model.powers": {"type": "categorical", "choices": [[1, 3], [2]]}}), BASE, RULES
    )
    dist = distributions(cfg)["model.powers"]
    optuna.distributions.check_distribution_compatibility(dist, dist)
    assert dist.choices == ("[1, 3]", "[2]")
    assert [decode_choice(c) for c in dist.choices] == [[1, 3], [2]]


def test_grid_values_cover_the_range() -> None:
    cfg = validate_sweep(
        sweep(
            sampler={"name": "grid"},
            trials=6,
            space={
                "training.batch_size": {"type": "int", "low": 32, "high": 96, "step": 32},
                "model.l2": {"type": "float", "low": 0.1, "high": 0.3, "step": 0.1},
            },
        ),
        BASE,
        RULES,
    )
    assert grid_values(cfg.space["training.batch_size"]) == [32, 64, 96]
    assert grid_values(cfg.space["model.l2"]) == [0.1, 0.2, 0.3]


def test_space_changes_name_each_path() -> None:
    old = {"model.l2": {"type": "float", "low": 0.0, "high": 0.5}, "model.powers": {"type": "int"}}
    new = {"model.l2": {"type": "float", "low": 0.0, "high": 0.4}, "training.seed": {"type": "int"}}
    lines = space_changes(old, new)
    assert lines[0].startswith("space.model.l2: changed from")
    assert lines[1].startswith("space.model.powers: removed")
    assert lines[2] == "space.training.seed: added (the study was started without it)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "sweep config not found (pass --sweep configs/sweep.yaml)"),
        ("", "top level must be a mapping (study_name, space, trials, ...)"),
        ("[1, 2]", "top level must be a mapping (study_name, space, trials, ...)"),
        ("study_name: [", "not valid YAML:"),
    ],
)
def test_a_sweep_file_that_is_not_a_mapping_says_what_it_should_hold(
    tmp_path, text: str | None, expected: str
) -> None:
    path = tmp_path / "sweep.yaml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(SweepConfigError) as caught:
        read_sweep(path)
    assert str(caught.value).startswith(f"{path}: ") and expected in str(caught.value)
