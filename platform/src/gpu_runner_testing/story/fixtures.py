"""The stories' fixtures, as a pytest plugin: the stack every story shares and the Batch host's, and the order in
which `make e2e`'s workers take the stories. A project's root conftest.py loads it beside the platform's servers
(`pytest_plugins = [..., "gpu_runner_testing.story.fixtures"]`), so they reach its own stories in tests/e2e/ and
the platform's (gpu_runner_testing.story.platform_stories), which `make e2e` collects from the installed platform.
The harness is imported only when a story asks for a stack: `make test` never loads it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from gpu_runner_testing.story.stories import Stack

# The longest stories first (measured with --durations: a sweep story takes about 2 min, a fault scenario under
# half of one): xdist hands tests out in this order, so both workers start on long ones and the run does not
# end with one worker alone on a sweep story while the other idles.
LONGEST_FIRST = (
    "test_sweep_workflow",
    "test_batch_sweep_workflow",
    "test_batch_sweep_story",
    "test_predict_story",
    "test_foreign_stop_story",
    "test_fault_scenarios",
    "test_mlflow_server_story",
    "test_train_workflow",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.stem
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within a file, and of every other test, is kept


@pytest.fixture(scope="session")
def batch_host_stack(batch_endpoint: str, mlflow_server: str) -> Stack:
    """The batch backend's workflow stories' AWS: the batch host with the project's queue and job definition."""
    from gpu_runner_testing.story.batch_story import batch_host_stack as make_batch_host_stack

    return make_batch_host_stack(batch_endpoint, mlflow_server)


@pytest.fixture(scope="session")
def stack(moto_endpoint: str, mlflow_server: str) -> Stack:
    """The servers, the GPU-image stand-in and the AWS set-up every story shares."""
    from gpu_runner_testing.story.harness import PROJECT, image_python
    from gpu_runner_testing.story.stories import make_stack

    return make_stack(moto_endpoint, mlflow_server, image_python(PROJECT / ".e2e-cache"))
