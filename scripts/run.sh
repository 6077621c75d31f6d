#!/usr/bin/env bash
# The seeds' run.sh (MindSpore distributed-training tutorial), same command line,
# on top of dlaunch: bash scripts/run.sh DATA_PATH RANK_SIZE. See usage() below.
set -euo pipefail
seeds_prog=run.sh  # for messages of _seeds.sh

usage() {
  cat << 'EOF_USAGE'
==============================================================================================================
Please run the script as:
bash run.sh DATA_PATH RANK_SIZE [dlaunch run options] [-- training script arguments]
For example: bash run.sh /path/dataset 8
It is better to use the absolute path.

This is the seeds' run.sh on top of dlaunch. It exports DATA_PATH and runs
  dlaunch run "${DLAUNCH_TRAIN_SCRIPT:-examples/train_cifar.py}" --ranks RANK_SIZE [options] [-- arguments]
so every rank gets DEVICE_ID, RANK_ID, RANK_SIZE, RANK_TABLE_FILE (a generated table; device IPs from
/etc/hccn.conf) and the PyTorch variables, one failing rank stops all, and nothing is deleted: each run
gets its own dlaunch_runs/<run id>/. As the seeds did, ./device$i shows device i's files, but as a
symlink to the run's rank directory (an old symlink is replaced; a real device$i directory is left
alone), with train.log$i (its output) and env$i.log (its environment) inside. As in the seeds, each rank
runs in its own directory (dlaunch run --cwd rank; add --cwd launch to run all where you are).

  DLAUNCH_TRAIN_SCRIPT  the training script (default: this checkout's examples/train_cifar.py)
  DLAUNCH               the dlaunch command (default: this checkout's .venv, else dlaunch on PATH)
  --output-dir, --run-id  honoured when given after the positional arguments (DLAUNCH_OUTPUT_DIR too): the
                        script passes both to dlaunch itself, to know where the device links point
  DLAUNCH_<OPTION>      any dlaunch run option, e.g. DLAUNCH_CONSOLE=all (see dlaunch run --help)
The exit code is dlaunch's: 0, or the code of the rank that failed first.
==============================================================================================================
EOF_USAGE
}

case ${1:-} in
  -h | --help) usage; exit 0 ;;
esac
if [ $# -lt 2 ]; then
  usage >&2
  exit 2
fi
# shellcheck source=_seeds.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/_seeds.sh"

DATA_PATH=$(seeds_absolute "$1")
export DATA_PATH
RANK_SIZE=$2
shift 2
[[ $RANK_SIZE =~ ^[1-9][0-9]*$ ]] || seeds_die "RANK_SIZE must be a number of devices, not '$RANK_SIZE'"
train_script=${DLAUNCH_TRAIN_SCRIPT:-$seeds_root/examples/train_cifar.py}
seeds_dlaunch
seeds_split_args "$@"

launch=(run "$train_script" --ranks "$RANK_SIZE" --output-dir "$output_dir" --run-id "$run_id" --cwd rank "${options[@]}")
[ "$has_script_args" = 0 ] || launch+=(-- "${script_args[@]}")
ranks=()
for ((i = 0; i < RANK_SIZE; i++)); do ranks+=("$i"); done
seeds_launch device "$RANK_SIZE" "train.log@" "env@.log" -- "${ranks[@]}" -- "${launch[@]}"
