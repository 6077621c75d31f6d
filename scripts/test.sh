#!/usr/bin/env bash
# Run the whole dlaunch test suite on any machine, fresh or not:
# installs the Debian packages the suite needs (openssh-server for the real
# sshd hosts of the multi-host tests, chromium for the report screenshot,
# slurm-wlm and munge for a real one-machine Slurm, shellcheck for generated
# scripts), creates .venv, installs dlaunch with its torch and test extras,
# then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh
ensure_debian_packages openssh-server:/usr/sbin/sshd chromium:/usr/bin/chromium \
  slurm-wlm:/usr/sbin/slurmctld munge:/usr/sbin/munged shellcheck:/usr/bin/shellcheck
ensure_venv torch,mindspore,test
export DLAUNCH_REQUIRE_MINDSPORE=1   # the MindSpore tests fail rather than skip when it is missing
exec .venv/bin/python -m pytest "$@"
