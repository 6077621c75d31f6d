#!/usr/bin/env bash
# The main job on its bundled default: an 8-rank CPU data-parallel training run
# of examples/train_cifar.py (synthetic CIFAR-10-format data unless DATA_PATH
# points at a real cifar-10-batches-bin), one process per "device", started by
# dlaunch. Sets up .venv on a fresh machine first. Extra arguments go to dlaunch
# run, e.g. scripts/demo.sh --console all.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh
ensure_venv torch
exec .venv/bin/dlaunch run examples/train_cifar.py --ranks 8 "$@"
