"""On ``PYTHONPATH`` of a ``drl train`` started by tests/test_run_life.py: holds the run in
the middle of writing a checkpoint or a replay file, so that a signal or a kill lands there.

With ``DRL_TEST_HOLD_WRITE=<marker folder>``, the ``round``-th write of a latest checkpoint
(``model_<name>.pt``; ``DRL_TEST_HOLD_ROUND``, default 2), or with ``DRL_TEST_HOLD_REPLAY=1``
of a replay file (``model_<name>_replay.npz``), stops after its data is written and before the
file replaces the previous one: it creates ``<folder>/reached`` and waits (at most 120 s) for
``<folder>/release``.
"""

import os

if os.environ.get("DRL_TEST_HOLD_WRITE"):
    import contextlib
    import time

    import drlcli.atomic as _atomic

    _original = _atomic.atomic_output
    _writes = []

    def _held_kind(name):
        if os.environ.get("DRL_TEST_HOLD_REPLAY"):
            return name.endswith("_replay.npz")
        return name.startswith("model_") and name.endswith(".pt") and "_best" not in name

    @contextlib.contextmanager
    def _held(path):
        with _original(path) as temp:
            yield temp
            name = os.path.basename(str(path))
            if _held_kind(name):
                _writes.append(name)
                if len(_writes) == int(os.environ.get("DRL_TEST_HOLD_ROUND", "2")):
                    folder = os.environ["DRL_TEST_HOLD_WRITE"]
                    open(os.path.join(folder, "reached"), "w").close()
                    deadline = time.monotonic() + 120
                    release = os.path.join(folder, "release")
                    while not os.path.exists(release) and time.monotonic() < deadline:
                        time.sleep(0.05)

    _atomic.atomic_output = _held
