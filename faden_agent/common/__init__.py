"""Ground-floor helpers every room may use: backoff, error lines, redaction, logging set-up,
process titles, test hooks, cold library pages, the Docker engine's client and its API negotiation. They import
nothing of the agent above them."""
