"""The team's own project, for the tests copied verbatim into every bake that read it (tests/runner's policy,
stack and doctor tests): its package name is an answer, so it is written here, where the template renders it,
and the platform's doubles never look for the project."""

from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
PROJECT_PACKAGE = "{{ cookiecutter.package_name }}"
