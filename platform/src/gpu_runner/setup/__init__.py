"""`gpu-runner bootstrap`: the gpu-runner stack, the OIDC subject, the bucket's administrators, the reaper's package and the trust policies' size."""

from pathlib import Path

# The gpu-runner stack's CloudFormation template (what `bootstrap` deploys): package data, the same for every project
# (its parameters carry the project, repository and settings).
TEMPLATE = Path(__file__).with_name("gpu-runner.yaml")
