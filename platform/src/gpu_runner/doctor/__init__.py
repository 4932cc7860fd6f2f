"""`gpu-runner doctor`: the read-only preflight of AWS, GitHub, the branch rules and MLflow."""
