"""PyInstaller entry point of the standalone binary: the same CLI as the pip install."""

from faden_agent.service.standalone import start_from_launcher

start_from_launcher()  # before the CLI's imports: hold this unpacked build, prune older ones

from faden_agent.cli.launch import main  # noqa: E402

main()
