from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.config import Config, ConfigError, config_from_dict, load_config

PROJECT = Path(__file__).resolve().parent.parent


def test_shipped_config_is_valid_and_matches_the_defaults() -> None:
    cfg = load_config(PROJECT / "configs" / "train.yaml")
    assert cfg == Config()


def test_flat_params_cover_every_field() -> None:
    params = Config().flat_params()
    assert params["training.epochs"] == "20"
    assert params["data.source"] == "digits"
    assert len(params) == sum(len(section) for section in Config().model_dump().values())


@pytest.mark.parametrize(
    ("raw", "field", "hint"),
    [
        ({"training": {"epoch": 3}}, "training.epoch", "unknown key"),
        ({"trainig": {}}, "trainig", "unknown key"),
        ({"training": {"epochs": 0}}, "training.epochs", "greater than 0"),
        ({"training": {"batch_size": "big"}}, "training.batch_size", "valid integer"),
        ({"training": {"learning_rate": -1}}, "training.learning_rate", "greater than 0"),
        ({"data": {"channels": 2}}, "data.channels", "1 or 3"),
        ({"data": {"source": "  "}}, "data.source", "digits"),
        ({"data": {"source": "s3:///prefix"}}, "data.source", "no bucket"),
        ({"data": {"validation_fraction": 0.45, "test_fraction": 0.45}}, "data", "below 0.8"),
        ({"model": {"filters": []}}, "model.filters", "at least one"),
        ({"model": {"dropout": 1.0}}, "model.dropout", "less than 1"),
        ({"export": {"tflite_min_agreement": 1.5}}, "export.tflite_min_agreement", "less than or equal to 1"),
    ],
)
def test_bad_values_name_the_field(raw: dict, field: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw, "train.yaml")
    message = str(info.value)
    assert message.startswith("train.yaml: ")
    assert f"  {field}: " in message
    assert hint in message


def test_every_bad_field_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"training": {"epochs": -1, "seed": -2}})
    assert "2 invalid field(s)" in str(info.value)


def test_config_is_frozen() -> None:
    cfg = Config()
    with pytest.raises(ValueError, match="frozen"):
        cfg.training.epochs = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "hint"),
    [("training: [1, 2", "not valid YAML"), ("- a\n- b\n", "top level must be a mapping")],
)
def test_unreadable_files(tmp_path: Path, text: str, hint: str) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=hint):
        load_config(path)


def test_missing_file_says_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("# nothing\n")
    assert load_config(path) == Config()
