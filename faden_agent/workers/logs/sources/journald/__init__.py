"""The journald source: journalctl's export stream, its parser, its sequence gaps."""
