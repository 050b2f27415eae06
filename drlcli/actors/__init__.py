"""Policy actors: the contract (docs/adr/0017-custom-policy-actors.md), the built-in actors, and
building one from a spec."""
