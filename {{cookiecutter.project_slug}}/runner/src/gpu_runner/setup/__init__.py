"""`gpu-runner bootstrap`: the gpu-runner stack, the OIDC subject, the bucket's administrators, the reaper's package and the trust policies' size."""
