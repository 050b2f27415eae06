"""drl checkpoints: ``record`` (the typed ``Checkpoint`` and its plain-data form), ``files``
(atomic writing, the content hash, reading without running code), ``checks`` (actor semantics,
learner states, the fit to an environment) and ``verified`` (every check of ``drl verify``, and
the reader drl's commands use)."""
