"""The AWS Batch backend: its stack, job submission, source bundles, waiting, and the jobs' costs."""

from pathlib import Path

# The Batch stack's CloudFormation template: package data, the same for every project
# (its parameters carry the project, repository and settings).
TEMPLATE = Path(__file__).with_name("batch.yaml")
