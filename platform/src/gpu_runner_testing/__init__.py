"""The platform's test doubles: stand-ins for what cannot run offline (GitHub's REST API, AWS limits and faults
moto ignores, the instance metadata service, EC2's boot of the runner instance, AWS Batch's container host) and
the servers and fixtures the runner, ML and e2e tests share around them.

Shipped with the platform (the `testing` extra of gpu-runner) so that a generated project's tests and its story
under act use the doubles of the platform commit it pins, without a copy of them. A second top-level package, never
inside `gpu_runner`: the reaper Lambda zips that whole directory, and nothing of the product may import this
(the `runtime-without-doubles` import contract).

The fixtures are a pytest plugin, loaded explicitly with `pytest_plugins = ["gpu_runner_testing.pytest_plugin"]`
in a root conftest.py and never through an entry point: importing it points every AWS client at fake credentials.
"""
