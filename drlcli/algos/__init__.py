"""Training algorithms: one package per algorithm (params, algorithm entry, learner, networks,
buffers, rollout workers as plain classes); ``registry.py`` lists them and ``algorithm.py``
declares what an entry holds. The Ray shells are in ``drlcli/runtime/``."""
