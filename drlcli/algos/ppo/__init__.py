"""PPO (Schulman et al. 2017): Learner.train_step, the on-policy ReplayBuffer, MuJoCoActor."""
