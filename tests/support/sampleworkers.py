"""Workers used only by the supervisor tests: a steady one and one that crashes at start.
They run under the real supervisor, forked like the production workers."""

from faden_agent.workers.base import Worker


class SteadyWorker(Worker):
    """Does nothing but run its loop and heartbeat."""


class CrashAtStartWorker(Worker):
    def setup(self) -> None:
        raise RuntimeError("this worker crashes at start on purpose")


class EnvironmentWorker(Worker):
    """Writes the environment a program it starts sees (as a container tool would) to
    $FADEN_TEST_ENV_DUMP."""

    def setup(self) -> None:
        import os
        import subprocess

        seen = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout
        with open(os.environ["FADEN_TEST_ENV_DUMP"] + ".tmp", "w") as out:
            out.write(seen)
        os.rename(os.environ["FADEN_TEST_ENV_DUMP"] + ".tmp", os.environ["FADEN_TEST_ENV_DUMP"])


class IgnoresSigtermWorker(Worker):
    """A worker that does not stop when asked, to exercise the stop bound."""

    def setup(self) -> None:
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def supervisor_argv(workers: dict[str, str]) -> list[str]:
    """A command line that runs the real Supervisor with a custom worker table."""
    import sys

    code = (
        "import sys\n"
        "from faden_agent.config import load_config\n"
        "from faden_agent.common.logsetup import configure_logging\n"
        "from faden_agent.supervisor import Supervisor\n"
        "config = load_config()\n"
        "configure_logging(config.log_level, 'faden-agent')\n"
        f"sys.exit(Supervisor(config, workers={workers!r}).run())\n"
    )
    return [sys.executable, "-c", code]
