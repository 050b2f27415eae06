"""Ray orchestration: session, ParameterServer, the round loop of training."""
