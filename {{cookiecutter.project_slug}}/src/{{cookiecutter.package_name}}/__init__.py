"""TensorFlow 2.15 training tracked in MLflow.

Importing the package is cheap on purpose (no TensorFlow import), so config checks and the CLI's --help are instant.
"""

__version__ = "0.1.0"
