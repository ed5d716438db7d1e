"""The report path: what a worker reports reaches the backend, durably.
Notes (why, figures, history): docs/design-notes.md.
"""
