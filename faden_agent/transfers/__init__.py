"""Transfers between peer machines of a cluster: images (archive, tickets, server, fetch) and
active probes (probe, probe_client). A regular package on purpose: setuptools' find_packages
(pyproject.toml) and PyInstaller's --collect-submodules (packaging/build.sh) both skip a
directory without __init__.py, so a wheel lacked these modules and the standalone build had
them only through the static imports it happened to follow."""
