"""Promote: decide with the default branch's code whether a training run's model replaces the champion, and if
it does, make it the served version (issue 30, High 1 to 3). promote.yml runs this on the default branch, in the
`production` environment, with the `promote` MLflow credential (and the promote role for an S3 held-out set).

1. The candidate run's files (`exports/`: the SavedModel, each TFLite export, class_names.json) are downloaded;
   what the run logged about itself (test_accuracy, tags, its decision) is never read.
2. Those very files are measured on the held-out set (holdout.py) with this checkout's code: the SavedModel gives
   `registry.metric`; a TFLite export that agrees with it on fewer than `export.tflite_min_agreement` of the
   images is not promoted (predict's CPU path would serve it).
3. The champion's files are downloaded, checked against the SHA-256 promote recorded for them, and measured the
   same way (same images, same code). A champion without that record (registered before it existed) counts as no
   champion: predict refuses it anyway. A champion whose files changed stops promote with the file named.
4. Only a strictly better candidate moves the alias: the files it measured are logged to a new run of the
   `<model> promotions` experiment (which `ci` may read but not write), registered as a version of the served
   model with the digest of their manifest as a tag (gpu_job.manifest), and the alias moves to it.
Every evaluation, promoted or not, is a run of the promotions experiment with both sets of figures.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gpu_job import manifest, registry, tracking
from mlflow.entities import Metric
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from . import evaluate, export, holdout, model_files
from .config import Config
from .errors import FilesChanged

PROMOTIONS_SUFFIX = " promotions"
CANDIDATE_TAG = "promote.candidate_run_id"
TFLITE_EXPORTS = model_files.TFLITE_PATHS


class PromoteError(Exception):
    """Promote cannot decide: the message names what and the fix; nothing was registered or moved."""


@dataclass(frozen=True)
class Measured:
    """One model's files on the held-out set: the SavedModel's metrics (the decision's), each export's accuracy
    and agreement with the SavedModel, the TFLite exports not fit to serve (and why), and the artifact paths
    measured (the files that would be served)."""

    metrics: dict[str, float]
    exports: dict[str, dict[str, float]]
    dropped: dict[str, str]
    files: list[str]


@dataclass(frozen=True)
class Promotion:
    decision: registry.ChampionDecision
    candidate: Measured
    champion: Measured | None
    run_id: str
    holdout: str
    images: int
    candidate_run: str
    notes: list[str] = field(default_factory=list)


def promotions_experiment(model_name: str) -> str:
    """The experiment of the served versions' runs (created by the team server's stack: `ci` may only read it)."""
    return model_name + PROMOTIONS_SUFFIX


def promote(client: MlflowClient, cfg: Config, run_id: str, scratch: Path) -> Promotion:
    """Measure the run's model and the champion on the held-out set; register and move the alias when the
    candidate is strictly better. PromoteError when nothing can be decided (nothing is changed then)."""
    _check_finished(client, run_id)
    held = holdout.load(cfg)
    candidate_root = _download(client, run_id, scratch / "candidate")
    candidate = measure(candidate_root, held, cfg.export.tflite_min_agreement, f"run {run_id}")
    holder = registry.alias_holder(client, cfg.registry.model_name, cfg.registry.alias)
    champion, notes = None, []
    if holder is not None and manifest.MANIFEST_TAG in (holder.tags or {}):
        champion_root = champion_files(client, holder, scratch / "champion")
        champion = measure(
            champion_root, held, cfg.export.tflite_min_agreement, f"champion v{holder.version}"
        )
    elif holder is not None:
        notes.append(
            f"champion v{holder.version} was registered before promote recorded the SHA-256 of its files: predict "
            "refuses it, so it is not compared with"
        )
    decision = _decide(cfg, candidate, holder, champion, notes)
    promotion_run = _record(client, cfg, run_id, held, candidate, champion, decision)
    try:
        if decision.outcome in registry.MOVES_ALIAS:
            version = _serve(client, cfg, run_id, promotion_run, candidate_root, candidate, decision)
            decision = decision.but(decision.outcome, decision.reason, version=version)
            client.set_tag(promotion_run, "registry.version", version)
    except BaseException:
        # The evaluation's record says it did not serve (the caller reports why); nothing is left RUNNING.
        client.set_terminated(promotion_run, "FAILED")
        raise
    client.set_terminated(promotion_run)
    return Promotion(
        decision, candidate, champion, promotion_run, held.source, len(held.labels), run_id, notes
    )


def _decide(
    cfg: Config, candidate: Measured, holder: ModelVersion | None, champion: Measured | None, notes: list[str]
) -> registry.ChampionDecision:
    """The rule on what promote measured: strictly better than the champion's measure, or no champion to compare
    with (none yet, or one whose files were never recorded)."""
    value = candidate.metrics[cfg.registry.metric]
    if holder is not None and champion is None:
        first = registry.compare(cfg.registry, value, None, None)
        return first.but("promoted", notes[0], previous_version=registry.version_number(holder))
    held = champion.metrics[cfg.registry.metric] if champion else None
    decision = registry.compare(
        cfg.registry, value, registry.version_number(holder) if holder else None, held
    )
    if champion is None:
        return decision
    return decision.but(decision.outcome, f"{decision.reason}, both on the held-out set")


def _check_finished(client: MlflowClient, run_id: str) -> None:
    try:
        status = client.get_run(run_id).info.status
    except MlflowException as error:
        raise PromoteError(
            f"--run-id {run_id}: no such run on this tracking server ({error.message})"
        ) from None
    if status != "FINISHED":
        raise PromoteError(f"--run-id {run_id}: the run is {status}; promote a run that finished training")


def _download(client: MlflowClient, run_id: str, dest: Path) -> Path:
    """The run's exports/ into dest/exports; only the files predict may load are measured and served."""
    listed = {Path(a.path).name for a in client.list_artifacts(run_id, model_files.SAVED_MODEL_DIR)}
    if "saved_model.pb" not in listed:
        raise PromoteError(
            f"--run-id {run_id}: the run has no {model_files.SAVED_MODEL_DIR}/saved_model.pb (the model of record "
            "train exports); promote a run that trained to the end"
        )
    dest.mkdir(parents=True)
    try:
        client.download_artifacts(run_id, model_files.EXPORTS_DIR, str(dest))
    except (MlflowException, OSError) as error:
        raise PromoteError(f"--run-id {run_id}: its exports/ could not be downloaded ({error})") from None
    if not (dest / model_files.CLASS_NAMES_PATH).is_file():
        raise PromoteError(
            f"--run-id {run_id}: the run has no {model_files.CLASS_NAMES_PATH} to label its outputs"
        )
    return dest


def champion_files(client: MlflowClient, holder: ModelVersion, dest: Path) -> Path:
    """The champion's files, each checked against the manifest promote recorded; PromoteError names a changed one."""
    dest.mkdir(parents=True)
    tag = holder.tags[manifest.MANIFEST_TAG]
    try:
        body = Path(client.download_artifacts(holder.run_id, manifest.MANIFEST_PATH, str(dest))).read_bytes()
        recorded = manifest.read_manifest(body, tag)
        client.download_artifacts(holder.run_id, model_files.EXPORTS_DIR, str(dest))
        manifest.verify(dest, recorded, _wanted(recorded))
    except FilesChanged as changed:
        raise PromoteError(
            f"champion v{holder.version}: {changed}: its files changed after promotion, so it cannot be measured "
            "as what was promoted (and predict refuses it). Fix: restore the file's earlier version in the bucket "
            "(versioning keeps it), or have an MLflow admin remove the alias so that the next promote makes a "
            "first champion"
        ) from None
    except (MlflowException, OSError) as error:
        raise PromoteError(
            f"champion v{holder.version}: its files could not be downloaded ({error})"
        ) from None
    return dest


def _wanted(recorded: dict[str, str]) -> list[str]:
    """What to check of a download: the SavedModel folder whole (an added file is refused), each other file."""
    inside = model_files.SAVED_MODEL_DIR + "/"
    return [model_files.SAVED_MODEL_DIR, *sorted(p for p in recorded if not p.startswith(inside))]


def _class_names(root: Path, who: str) -> tuple[str, ...]:
    path = root / model_files.CLASS_NAMES_PATH
    try:
        names = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        names = None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise PromoteError(f"{who}: {model_files.CLASS_NAMES_PATH} is not a list of class names")
    return tuple(names)


def _named(scores: np.ndarray, names: tuple[str, ...]) -> list[str]:
    """The class each row of scores picks, by the model's own class_names.json (an output it has no name for
    is a wrong answer, never an error)."""
    picked = np.argmax(scores, axis=-1)
    return [names[i] if i < len(names) else "" for i in picked]


def _figures(predicted: list[str], held: holdout.HeldOut) -> dict[str, float]:
    classes = tuple(sorted(set(held.labels)))
    index = {name: i for i, name in enumerate(classes)}
    truth = np.array([index[name] for name in held.labels])
    guess = np.array([index.get(name, -1) for name in predicted])
    return evaluate.evaluate(truth, guess, classes).metrics()


def measure(root: Path, held: holdout.HeldOut, min_agreement: float, who: str) -> Measured:
    """The files under `root` (a run's artifacts as downloaded) on the held-out set."""
    names = _class_names(root, who)
    try:
        saved = export.SavedModelPredictor(root / model_files.SAVED_MODEL_DIR)
        reference = _named(saved(held.images(saved.input_shape)), names)
    # What a broken or foreign SavedModel raises is TensorFlow's to choose (OSError, ValueError, TypeError,
    # tf.errors.*): whatever it is, this model cannot be measured, and the message says whose it is.
    except Exception as error:
        raise PromoteError(
            f"{who}: exports/saved_model could not be run ({type(error).__name__}: {error})"[:500]
        ) from None
    metrics = _figures(reference, held)
    exports = {"saved_model": {"test_accuracy": metrics["test_accuracy"]}}
    dropped: dict[str, str] = {}
    for name, path in TFLITE_EXPORTS.items():
        if not (root / path).is_file():
            continue
        try:
            lite = export.TFLitePredictor(root / path)
            predicted = _named(lite(held.images(lite.input_shape)), names)
        except Exception as error:  # as above; a TFLite export that cannot run is never served
            dropped[name] = f"could not be run ({type(error).__name__}: {error})"[:300]
            continue
        agreement = float(np.mean([a == b for a, b in zip(predicted, reference, strict=True)]))
        exports[name] = {"test_accuracy": _figures(predicted, held)["test_accuracy"], "agreement": agreement}
        if agreement < min_agreement:
            dropped[name] = (
                f"agrees with the SavedModel on {agreement:.1%} of the held-out images, below "
                f"export.tflite_min_agreement={min_agreement:.0%}"
            )
    files = [p for p in model_files.served_files(root) if p not in {TFLITE_EXPORTS[d] for d in dropped}]
    return Measured(metrics, exports, dropped, files)


def _record(
    client: MlflowClient,
    cfg: Config,
    run_id: str,
    held: holdout.HeldOut,
    candidate: Measured,
    champion: Measured | None,
    decision: registry.ChampionDecision,
) -> str:
    """A run of the promotions experiment for this evaluation: the candidate's figures under their own names (a
    served version's run then holds what promote measured, which training and the pull request compare with),
    the champion's as champion.<name>, and the decision."""
    experiment = _promotions_experiment_id(client, promotions_experiment(cfg.registry.model_name))
    tags = {
        **tracking.run_tags(),
        CANDIDATE_TAG: run_id,
        "promote.holdout": held.source,
        "promote.holdout_images": str(len(held.labels)),
    }
    if decision.previous_version:
        tags["promote.champion_version"] = decision.previous_version
    run = client.create_run(experiment, run_name=f"promote {run_id[:12]}", tags=tags)
    figures = {**candidate.metrics, **_per_export(candidate)}
    if champion:
        figures |= {f"champion.{k}": v for k, v in {**champion.metrics, **_per_export(champion)}.items()}
    now = int(time.time() * 1000)
    client.log_batch(run.info.run_id, metrics=[Metric(k, v, now, 0) for k, v in figures.items()])
    for name, why in candidate.dropped.items():
        client.set_tag(run.info.run_id, f"export.{name}", f"not promoted: {why}")
    registry.log_decision(client, run.info.run_id, decision)
    return run.info.run_id


def _per_export(measured: Measured) -> dict[str, float]:
    return {
        f"{name}.{key}": value for name, figures in measured.exports.items() for key, value in figures.items()
    }


def _promotions_experiment_id(client: MlflowClient, name: str) -> str:
    """The stack's server creates it (`ci` READ, `promote` EDIT); a local store or a bare server gets it here."""
    found = client.get_experiment_by_name(name)
    return found.experiment_id if found else client.create_experiment(name)


def _serve(
    client: MlflowClient,
    cfg: Config,
    candidate_run: str,
    promotion_run: str,
    root: Path,
    measured: Measured,
    decision: registry.ChampionDecision,
) -> str:
    """The measured files into the promotion run, their manifest beside them, a version of the served model
    with the manifest's digest as a tag, the alias on it; returns the version number."""
    served = root.parent / "served"
    for path in measured.files:
        (served / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, served / path)
    body = manifest.manifest(served, measured.files)
    (served / manifest.MANIFEST_PATH).parent.mkdir(parents=True)
    (served / manifest.MANIFEST_PATH).write_bytes(body)
    client.log_artifacts(promotion_run, str(served / model_files.EXPORTS_DIR), model_files.EXPORTS_DIR)
    client.log_artifact(
        promotion_run,
        str(served / manifest.MANIFEST_PATH),
        Path(manifest.MANIFEST_PATH).parent.as_posix(),
    )
    name = cfg.registry.model_name
    try:
        client.get_registered_model(name)
    except MlflowException as error:
        if error.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        client.create_registered_model(name)  # a local store; the team server's stack creates it
    source = f"{client.get_run(promotion_run).info.artifact_uri}/{model_files.EXPORTS_DIR}"
    tags = {
        manifest.MANIFEST_TAG: manifest.digest(body),
        CANDIDATE_TAG: candidate_run,
        registry.VERSION_DECISION_TAG: decision.outcome,
        registry.VERSION_REASON_TAG: tracking.tag_value(registry.VERSION_REASON_TAG, decision.reason),
        # The evaluation: what promote measured, on what (the run's figures are in the promotion run).
        "promote.holdout": cfg.registry.holdout,
        f"promote.{cfg.registry.metric}": f"{decision.candidate_value:.6f}",
    }
    version = client.create_model_version(name, source, run_id=promotion_run, tags=tags)
    client.set_registered_model_alias(name, cfg.registry.alias, str(version.version))
    return str(version.version)


def _accuracy(measured: Measured | None, export_name: str) -> str:
    figures = measured.exports.get(export_name) if measured else None
    return "-" if figures is None else f"{figures['test_accuracy']:.4f}"


def job_summary(uri: str, promotion: Promotion) -> str:
    """The decision table (registry.job_summary), then every figure promote measured, side by side."""
    head = registry.job_summary(uri, promotion.decision, candidate=f"run {promotion.candidate_run}")
    lines = [
        head,
        f"Measured by this checkout's code on the held-out set `{promotion.holdout}` ({promotion.images} images); "
        "the candidate run's own metrics were not read.",
        "",
        "| export | candidate accuracy | champion accuracy |",
        "|---|---|---|",
        *(
            f"| {name} | {_accuracy(promotion.candidate, name)} | {_accuracy(promotion.champion, name)} |"
            for name in promotion.candidate.exports
        ),
    ]
    lines += [f"\n- `{name}` not promoted: {why}" for name, why in promotion.candidate.dropped.items()]
    lines += [f"\n- {note}" for note in promotion.notes]
    return "\n".join(lines) + "\n"
