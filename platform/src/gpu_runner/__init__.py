"""Ephemeral self-hosted GPU runners on EC2: launch, wait, teardown, reap. No TensorFlow here, on purpose."""

__version__ = "0.1.0"
