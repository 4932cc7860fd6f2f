"""Where the runner tests' AWS world lives (shared by fixtures and tests)."""

REGION = "us-east-1"
OTHER_REGION = "eu-west-1"
AMI_PARAMETER = "/test/dlami/ami-id"
