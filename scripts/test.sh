#!/usr/bin/env bash
# Run the whole dlaunch test suite on any machine, fresh or not:
# installs the Debian packages the suite needs (openssh-server for the real
# sshd hosts of the multi-host tests, chromium for the report screenshot,
# slurm-wlm and munge for a real one-machine Slurm, shellcheck for generated
# scripts, prometheus to scrape a job's --metrics-port), creates .venv, installs dlaunch with its torch and test extras,
# then checks the code (ruff, mypy) and runs pytest, test files spread over
# DLAUNCH_TEST_WORKERS processes (default 2; 0 runs them in this one). Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh
ensure_debian_packages openssh-server:/usr/sbin/sshd chromium:/usr/bin/chromium \
  slurm-wlm:/usr/sbin/slurmctld munge:/usr/sbin/munged shellcheck:/usr/bin/shellcheck \
  prometheus:/usr/bin/prometheus
ensure_venv torch,mindspore,test
export DLAUNCH_REQUIRE_MINDSPORE=1   # the MindSpore tests fail rather than skip when it is missing
.venv/bin/ruff check --quiet launcher tests benchmarks examples
.venv/bin/mypy launcher
# Most tests wait on real processes (sockets, signals, grace periods) more than they compute, so two
# workers finish sooner even on 2 cores. Three finish sooner still (10:54-12:05 against ~14 min) but load
# this VM more: of four fresh-clone runs with three, one passed clean, one failed a test of its own, one
# another test, one four timing-sensitive tests (DLAUNCH_TEST_WORKERS=3 for the faster run). A file's tests
# stay together (--dist loadfile): they share fixtures such as one sshd per simulated host and one Slurm. The
# 30 slowest tests are listed at the end (tests/conftest.py LONGEST_FIRST starts the longest files first).
workers="${DLAUNCH_TEST_WORKERS:-2}"
if [ "$workers" = 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
exec .venv/bin/python -m pytest -n "$workers" --dist loadfile --durations=30 "$@"
