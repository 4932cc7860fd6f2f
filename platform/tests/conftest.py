"""The platform's tests use the fixtures it ships (gpu_runner_testing): the servers every test shares, and the
runner tests' AWS and GitHub doubles. Loaded here, before any test module is imported: no test may reach AWS."""

pytest_plugins = ["gpu_runner_testing.pytest_plugin", "gpu_runner_testing.runner_fixtures"]
