"""What `gpu-runner doctor` prints for a healthy account: the name of every check a full run reports, in order.

One list, two holders: the platform's tests/runner/test_doctor.py asserts that a run against the stack bootstrap
deployed to the moto server (two G instance types, spot on, the runner backend) prints exactly these; a project's
setup page lists them in its Preflight table, and the project's docs test holds the page to this list."""

EVERY_CHECK = (
    "AWS credentials", "stack", "platform trust", "OIDC provider", "train role trust", "reaper role trust",
    "sweep role trust", "predict role trust", "predict launch role trust", "promote role trust",
    "spot service-linked role", "vCPU quota L-DB2E81BA", "vCPU quota L-3819A6DF", "instance types offered", "AMI",
    "security group", "bucket", "instance profile", "runner credential", "repository variables and secrets",
    "default branch protection", "production environment", "fork pull request approval", "MLflow",
)  # fmt: skip
