"""Policy actors: the contract (ADR-0017), the built-in actors, and building one from a spec."""
