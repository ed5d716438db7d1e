"""The supervisor's memory work before it forks (prepare_to_fork is the one entry point)."""
