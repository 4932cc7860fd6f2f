"""The team's MLflow server: its stack, passwords, what it reads from the project, the tunnel and the wake."""
