"""A run's metrics: ``schema`` (the names, their meanings, how learners' values combine)
and ``csv_file`` (the canonical CSV, written and read)."""
