"""The team's MLflow server: its stack, passwords, what it reads from the project, the tunnel and the wake."""

from pathlib import Path

# The team MLflow server's CloudFormation template: package data, the same for every project
# (its parameters carry the project, repository and settings).
TEMPLATE = Path(__file__).with_name("mlflow-server.yaml")
