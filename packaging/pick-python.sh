#!/bin/sh
# Prints the interpreter to build and test the agent with: CPython 3.12 where the machine has
# one, else python3. On 3.12 the supervisor's objects become immortal before it forks, so
# the idle tree is about 15 MiB smaller (faden_agent/supervisor/prefork/immortal.py); 3.11 runs the
# same code without that. A pyenv shim of a version not selected does not run, so each
# candidate is tried.
for candidate in python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12; do
  if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
    echo "$candidate"
    exit 0
  fi
done
echo python3
