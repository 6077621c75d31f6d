#!/usr/bin/env bash
# The seeds' run_cluster.sh (MindSpore distributed-training tutorial), same command
# line, on top of dlaunch: bash scripts/run_cluster.sh DATA_PATH RANK_TABLE_FILE
# RANK_SIZE RANK_START on each host. See usage() below.
set -euo pipefail
seeds_prog=run_cluster.sh  # for messages of _seeds.sh

usage() {
  cat << 'EOF_USAGE'
==============================================================================================================
Please run the script as:
bash run_cluster.sh DATA_PATH RANK_TABLE_FILE RANK_SIZE RANK_START [JOB_NAME] [dlaunch cluster options] [-- script arguments]
For example: bash run_cluster.sh /path/dataset /path/rank_table.json 16 0 job42
It is better to use the absolute path.
The time interval between multiple hosts to execute the script should not exceed 120s

This is the seeds' run_cluster.sh on top of dlaunch. It checks that RANK_SIZE is the number of devices
in RANK_TABLE_FILE, exports DATA_PATH and runs this host's share of the table, the server whose ranks
start at RANK_START:
  dlaunch cluster "${DLAUNCH_TRAIN_SCRIPT:-examples/train_cifar.py}" --rank-table RANK_TABLE_FILE \
      --rank-start RANK_START [options] [-- arguments]
Every rank gets DEVICE_ID, RANK_ID, RANK_SIZE, RANK_TABLE_FILE and the PyTorch variables (MASTER_ADDR is
rank 0's server, MASTER_PORT 29500); one failing rank stops this host's ranks; nothing is deleted: each run
gets its own dlaunch_runs/<run id>/. The run id is JOB_NAME (or --run-id), else slurm-$SLURM_JOB_ID under
Slurm: give every host the same JOB_NAME and, on a shared filesystem, the whole job lands in one run
directory that dlaunch status, logs and report show whole. As the
seeds did, ./device_$RANK_ID shows that rank's files, but as a symlink to the run's rank directory (an
old symlink is replaced; a real device_$RANK_ID directory is left alone), with train$RANK_ID.log (its
output) inside; as in the seeds, each rank runs in its own directory (--cwd rank; add --cwd launch to run
all where you are). Pass --profile a2 (or structure) for tables HCCL's Atlas 910 rules refuse.

  DLAUNCH_TRAIN_SCRIPT  the training script (default: this checkout's examples/train_cifar.py)
  DLAUNCH               the dlaunch command (default: this checkout's .venv, else dlaunch on PATH)
  --output-dir, --run-id  honoured when given after the positional arguments (DLAUNCH_OUTPUT_DIR too): the
                        script passes both to dlaunch itself, to know where the device links point
  DLAUNCH_<OPTION>      any dlaunch cluster option, e.g. DLAUNCH_PROFILE=a2 (see dlaunch cluster --help)
The exit code is dlaunch's: 0, or the code of this host's rank that failed first.
==============================================================================================================
EOF_USAGE
}

case ${1:-} in
  -h | --help) usage; exit 0 ;;
esac
if [ $# -lt 4 ]; then
  usage >&2
  exit 2
fi
# shellcheck source=_seeds.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/_seeds.sh"

DATA_PATH=$(seeds_absolute "$1")
export DATA_PATH
RANK_TABLE_FILE=$2
RANK_SIZE=$3
RANK_START=$4
shift 4
seeds_job_name=""
if [ $# -gt 0 ] && [[ $1 != -* ]]; then # the optional JOB_NAME: every host given it shares one run directory
  seeds_job_name=$1
  shift
fi
[[ $RANK_SIZE =~ ^[1-9][0-9]*$ ]] || seeds_die "RANK_SIZE must be a number of devices, not '$RANK_SIZE'"
[[ $RANK_START =~ ^[0-9]+$ ]] || seeds_die "RANK_START must be a rank number, not '$RANK_START'"
train_script=${DLAUNCH_TRAIN_SCRIPT:-$seeds_root/examples/train_cifar.py}
seeds_dlaunch
seeds_split_args "$@"

# What the table says (its structure only; dlaunch cluster checks the rules of the chosen --profile):
# the number of devices, and the last rank of the server whose ranks start at RANK_START.
verdict=$("${dlaunch[@]}" validate-ranktable --json --profile structure "$RANK_TABLE_FILE" 2> /dev/null \
  | tr -d ' \t\n') || true
devices=$(sed -n 's/.*"devices":\([0-9][0-9]*\),"server_list".*/\1/p' <<< "$verdict")
[ -n "$devices" ] || seeds_die "cannot read the rank table $RANK_TABLE_FILE" \
  "($("${dlaunch[@]}" validate-ranktable --profile structure "$RANK_TABLE_FILE" 2>&1 | head -n 3 | tr '\n' ' '))"
[ "$devices" = "$RANK_SIZE" ] \
  || seeds_die "RANK_SIZE is $RANK_SIZE but $RANK_TABLE_FILE has $devices devices"
last=$(sed -n "s/.*\"ranks\":\[$RANK_START,\([0-9][0-9]*\)\].*/\1/p" <<< "$verdict")
ranks=()
if [ -n "$last" ]; then
  for ((rank = RANK_START; rank <= last; rank++)); do ranks+=("$rank"); done
fi # else no server starts at RANK_START: dlaunch says so, listing the table's servers

launch=(cluster "$train_script" --rank-table "$RANK_TABLE_FILE" --rank-start "$RANK_START"
  --output-dir "$output_dir" --run-id "$run_id" --cwd rank "${options[@]}")
[ "$has_script_args" = 0 ] || launch+=(-- "${script_args[@]}")
seeds_launch device_ "$RANK_SIZE" "train@.log" -- "${ranks[@]}" -- "${launch[@]}"
