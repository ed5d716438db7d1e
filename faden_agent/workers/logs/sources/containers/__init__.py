"""The container log source: followers of the managed containers' logs."""
