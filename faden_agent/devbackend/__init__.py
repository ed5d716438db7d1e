"""The reference backend: implements docs/protocol.md for tests, demos and trying the agent."""
