"""Training algorithms: each package holds its learner, buffer and rollout worker."""
