"""The project's own doubles: those that read this project's files (makefile: a target's recipe as its shell gets
it; runner_bad_input_triggers, half of docs/bad-input.md's table).

The platform's doubles (GitHub, AWS limits and faults, the boot sandbox, the Batch host, the stacks...) are not
copied here: they are the package gpu_runner_testing of the pinned platform (its `testing` extra). Importable as
`doubles.*` from every test directory: pyproject.toml's `[tool.pytest.ini_options] pythonpath`.
"""
