#!/usr/bin/env bash
# On a machine with NVIDIA GPUs (a lent device machine): run the agent's GPU probe and
# health read over every GPU through the real driver, and save what it saw as a fixture
# for the tests' C NVML (tests/nvml/fixtures) plus the raw JSON and nvidia-smi -q, in OUT.
#
#   bash bench/gpu_machine.sh [OUT]        (default: $OUT, else bench/results/gpu)
#
# Needs python3 and pynvml: the installed nvidia-ml-py, else PYNVML_DIR naming a folder
# holding pynvml.py (such a machine may have no network to pip from).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-bench/results/gpu}}"
mkdir -p "$out/fixtures"
if ! python3 -c 'import pynvml' 2>/dev/null; then
  [ -n "${PYNVML_DIR:-}" ] && [ -f "$PYNVML_DIR/pynvml.py" ] || { echo "no pynvml: pip install nvidia-ml-py, or set PYNVML_DIR" >&2; exit 2; }
  export PYTHONPATH="$PYNVML_DIR${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1 || echo "nvidia-smi failed (saved its output)" >&2
python3 bench/gpu_probe.py --rounds 5 --json "$out/gpu_probe.json" --fixture "$out/fixtures" > /dev/null
echo "saved: $out (copy $out/fixtures/*.json to tests/nvml/fixtures/)"
