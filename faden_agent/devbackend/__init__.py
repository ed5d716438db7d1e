"""The reference backend: implements docs/protocol.md for tests, demos and trying the agent.
Notes (why, figures, history): docs/design-notes.md.
"""
