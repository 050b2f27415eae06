"""Every Ray failure reads as a drl error: one line, a TrainingError (so a round's failure gets
the "last good checkpoint" line), never a Ray traceback."""

from __future__ import annotations

import time

import numpy as np
import pytest

from drlcli.errors import TrainingError
from drlcli.runtime.ray_errors import get_or_raise, worker_error

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _slow_result() -> np.ndarray:
    time.sleep(60)
    return np.zeros(3)


class Owner:
    """Starts a task whose result it owns (a reference inside a list is not returned by value)."""

    def make(self) -> list:
        import ray

        return [ray.remote(_slow_result).options(num_cpus=0).remote()]


def test_a_result_whose_owner_died_is_a_one_line_training_error():
    import ray

    owner = ray.remote(Owner).options(num_cpus=0).remote()
    [inner] = ray.get(owner.make.remote())
    ray.kill(owner)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the kill takes effect asynchronously
        try:
            ray.get(owner.make.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            break
        time.sleep(0.2)
    with pytest.raises(TrainingError) as error:
        get_or_raise(inner)
    message = str(error.value)
    assert message.startswith("a result was lost: the process that made it died: ")
    assert "\n" not in message


def _raises(error: Exception):
    raise error


@pytest.mark.parametrize(
    ("make", "meaning"),
    [
        (
            lambda e: e.ObjectFetchTimedOutError("ab" * 14, None, ""),
            "could not be fetched from the node that holds it",
        ),
        (
            lambda e: e.ObjectReconstructionFailedError("ab" * 14, None, ""),
            "lost from Ray's object store",
        ),
        (lambda e: e.NodeDiedError("node 1a2b died"), "a Ray node left the cluster"),
        (lambda e: e.WorkerCrashedError(), "a Ray worker process crashed"),
        (lambda e: e.OutOfMemoryError("the node ran low"), "to free memory"),
        (lambda e: e.RaySystemError("gcs went away"), "Ray failed (RaySystemError)"),
    ],
)
def test_each_kind_of_ray_failure_reads_as_what_it_means(make, meaning):
    import ray

    error = make(ray.exceptions)
    converted = worker_error(error)
    assert isinstance(converted, TrainingError) and meaning in str(converted)
    assert "\n" not in str(converted)
    # Raised in a worker's own Ray call, it comes back as the same error.
    remote = ray.remote(_raises).options(num_cpus=0, max_retries=0).remote(error)
    with pytest.raises(TrainingError, match=meaning.replace("(", r"\(").replace(")", r"\)")):
        get_or_raise(remote)
