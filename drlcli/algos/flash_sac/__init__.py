"""FlashSAC (arXiv 2604.04539): unit-norm networks, distributional double critic, learner."""
