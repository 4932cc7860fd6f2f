"""Which files of a run predict may load: this project's export layout (train.py writes it, promote records it).

Promote writes the manifest of these files (their SHA-256s, gpu_job.manifest) into the version's run and tags
the version with its digest; predict checks every file it downloaded against it before loading anything
(manual/predict.md#only-the-files-promote-measured). A project that exports another way (ONNX, another
folder) changes the names here.
"""

from __future__ import annotations

from pathlib import Path

from gpu_job.manifest import files_under

# The files of a run predict may load, by artifact path: the SavedModel folder, the two TFLite files, and the
# labels beside them.
EXPORTS_DIR = "exports"
CLASS_NAMES_FILE = "class_names.json"
EXPORT_FILES = {"saved_model": "saved_model", "tflite": "model.tflite", "tflite_int8": "model_int8.tflite"}
SAVED_MODEL_DIR = f"{EXPORTS_DIR}/{EXPORT_FILES['saved_model']}"
CLASS_NAMES_PATH = f"{EXPORTS_DIR}/{CLASS_NAMES_FILE}"
TFLITE_PATHS = {name: f"{EXPORTS_DIR}/{file}" for name, file in EXPORT_FILES.items() if name != "saved_model"}


def served_files(root: Path) -> list[str]:
    """The files of a run's artifacts (downloaded to `root`) that predict may load: what promote records."""
    found = files_under(root, SAVED_MODEL_DIR) if (root / SAVED_MODEL_DIR).is_dir() else []
    return found + [path for path in (*TFLITE_PATHS.values(), CLASS_NAMES_PATH) if (root / path).is_file()]
