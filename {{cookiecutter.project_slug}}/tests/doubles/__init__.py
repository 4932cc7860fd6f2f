"""Stand-ins for what cannot run offline (GitHub's REST API, AWS limits and faults moto ignores, the instance
metadata service, EC2's boot of the runner instance) and the helpers the runner and e2e tests share around them.

Importable as `doubles.*` from every test directory: pyproject.toml's `[tool.pytest.ini_options] pythonpath`.
"""
