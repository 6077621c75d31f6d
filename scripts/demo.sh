#!/usr/bin/env bash
# The main job on its bundled default. Sets up .venv on a fresh machine first.
# For now: validate and summarise every bundled rank table, then show how the
# validator reports a broken one.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh
ensure_venv torch
for table in rank_tables/*.json; do
  .venv/bin/dlaunch validate-ranktable "$table"
done
echo
echo "A table that breaks HCCL rule R6 (10.0.0.10 sorts before 10.0.0.9 as text):"
.venv/bin/dlaunch validate-ranktable rank_tables/invalid/r6_ip_ids_sort_as_text.json || true
