"""The executor worker: node commands against the Docker engine, and Docker events.

worker.py runs the loop; journal.py makes each command's effect happen once; kinds.py and
commands/ hold every kind (one module per family); docker_ops.py bounds each SDK call; events.py,
reconcile.py and adoption.py report what happens to managed containers.
"""
