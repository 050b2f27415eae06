"""SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications")."""
