"""The command line: the typer app, its launcher, doctor, status and the settings table."""
