"""PyInstaller entry point of the standalone binary: the same CLI as the pip install."""

from faden_agent.cli import main

main()
