"""Test-set evaluation: accuracy, per-class report, confusion matrix and learning curves as PNG files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: CI runners and GPU hosts have no display
import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import ConfusionMatrixDisplay, classification_report, confusion_matrix


@dataclass(frozen=True)
class Evaluation:
    accuracy: float
    report: dict
    report_text: str
    confusion: np.ndarray

    def metrics(self) -> dict[str, float]:
        """Flat test metrics for MLflow: accuracy plus macro averages."""
        macro = self.report["macro avg"]
        return {
            "test_accuracy": self.accuracy,
            "test_macro_precision": float(macro["precision"]),
            "test_macro_recall": float(macro["recall"]),
            "test_macro_f1": float(macro["f1-score"]),
        }


def evaluate(y_true: np.ndarray, y_pred: np.ndarray, class_names: tuple[str, ...]) -> Evaluation:
    labels = list(range(len(class_names)))
    report = classification_report(
        y_true, y_pred, labels=labels, target_names=list(class_names), output_dict=True, zero_division=0
    )
    text = classification_report(
        y_true, y_pred, labels=labels, target_names=list(class_names), zero_division=0
    )
    return Evaluation(
        accuracy=float(np.mean(y_true == y_pred)),
        report=report,
        report_text=text,
        confusion=confusion_matrix(y_true, y_pred, labels=labels),
    )


def plot_confusion_matrix(evaluation: Evaluation, class_names: tuple[str, ...], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 6))
    ConfusionMatrixDisplay(evaluation.confusion, display_labels=list(class_names)).plot(
        ax=ax, colorbar=False, cmap="Blues"
    )
    ax.set_title(f"Confusion matrix (test accuracy {evaluation.accuracy:.3f})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_learning_curves(history: dict[str, list[float]], path: Path) -> Path:
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for name, axis in (("loss", loss_ax), ("accuracy", acc_ax)):
        for prefix, style in (("", "-"), ("val_", "--")):
            values = history.get(prefix + name)
            if values:
                epochs = range(1, len(values) + 1)
                axis.plot(epochs, values, style, marker="o", label=prefix + name)
        axis.set_xlabel("epoch")
        axis.set_title(name)
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
