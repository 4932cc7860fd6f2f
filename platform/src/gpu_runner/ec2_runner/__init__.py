"""The EC2 runner backend: launch, wait and teardown of an ephemeral self-hosted GPU runner, its boot and hook scripts, resume after a spot interruption, capacity for a sweep, and the reaper."""
