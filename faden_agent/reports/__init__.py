"""The report path: what a worker reports reaches the backend, durably."""
