"""What the MLflow UI started by a baked project's `make mlflow-ui` shows of one run, printed as JSON.

Run by the baked project's own Python (the template's venv has no MLflow):
`python quick_start_read_back.py URI RUN_ID`. It reads through the UI's server with MlflowClient
(the same REST calls the UI makes) and lists artifacts with the endpoint the UI's artifact browser
calls, so a run the UI cannot show fails here. tests/test_generated_project.py asserts on the output.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient


def artifact_paths(uri: str, run_id: str, path: str = "") -> Iterator[str]:
    """Every artifact file of the run, as the server lists them (GET /api/2.0/mlflow/artifacts/list)."""
    query = urllib.parse.urlencode({"run_id": run_id, "path": path})
    with urllib.request.urlopen(f"{uri}/api/2.0/mlflow/artifacts/list?{query}", timeout=30) as answer:
        listing = json.load(answer)
    for entry in listing.get("files", []):
        if entry["is_dir"]:
            yield from artifact_paths(uri, run_id, entry["path"])
        else:
            yield entry["path"]


def registered_aliases(client: MlflowClient, model_name: str) -> dict[str, str]:
    """The registered model's aliases (alias -> version): an alias nobody holds yet is simply absent, where
    get_model_version_by_alias would raise; none before the first promotion, since training registers nothing
    and the model exists only once promote made it."""
    if not model_name:
        return {}
    try:
        return dict(client.get_registered_model(model_name).aliases)
    except MlflowException as error:
        if error.error_code == "RESOURCE_DOES_NOT_EXIST":
            return {}
        raise


def facts(uri: str, run_id: str) -> dict[str, object]:
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    tags = run.data.tags
    experiment_id = run.info.experiment_id
    model_name = tags.get("registry.model_name", "")
    aliases = registered_aliases(client, model_name)
    champion = client.get_model_version(model_name, aliases["champion"]) if "champion" in aliases else None
    logged = client.search_logged_models(experiment_ids=[experiment_id])
    return {
        "status": run.info.status,
        "experiment": client.get_experiment(experiment_id).name,
        "params": run.data.params,
        "metrics": run.data.metrics,
        "val_loss_points": len(client.get_metric_history(run_id, "val_loss")),
        "tags": {key: value for key, value in tags.items() if key.startswith(("champion.", "registry."))},
        "logged_models": [model.name for model in logged if model.source_run_id == run_id],
        "champion": None
        if champion is None
        else {"version": str(champion.version), "run_id": champion.run_id, "tags": champion.tags},
        "artifacts": sorted(artifact_paths(uri, run_id)),
    }


if __name__ == "__main__":
    print(json.dumps(facts(sys.argv[1], sys.argv[2])))
