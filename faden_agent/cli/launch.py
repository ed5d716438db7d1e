"""The `faden-agent` entry point (and `python -m faden_agent`, the service's command)."""

from __future__ import annotations

import sys

EXIT_CONFIG = 2


def run_agent() -> int:
    """Runs the supervisor and its workers in the foreground; the exit code. A bad setting or
    a supervisor that cannot start is one line on stderr."""
    from faden_agent.config import ConfigError, load_config

    try:
        config = load_config()
    except ConfigError as exc:
        return complain(str(exc), EXIT_CONFIG)
    from faden_agent.workers.executor.host_policy import policy_path_problem

    problem = policy_path_problem(config)
    if problem is not None:
        return complain(problem, EXIT_CONFIG)
    from faden_agent.cli.hardening import harden_process
    from faden_agent.common.logsetup import configure_logging
    from faden_agent.supervisor import Supervisor

    configure_logging(config.log_level, "faden-agent")
    harden_process()  # the token out of the environment, no core dumps: before any worker or child
    try:
        return Supervisor(config).run()
    except OSError as exc:
        return complain(f"cannot start the supervisor: {exc}", 1)


def complain(message: str, code: int) -> int:
    import logging

    from faden_agent.common.logsetup import journal_prefix

    print(f"{journal_prefix(logging.ERROR)}faden-agent: {message}", file=sys.stderr, flush=True)
    return code


def main() -> None:
    if sys.argv[1:] == ["run"]:
        try:
            sys.exit(run_agent())
        except KeyboardInterrupt:
            sys.exit(130)
    from faden_agent.cli.app import main as cli_main

    cli_main()
