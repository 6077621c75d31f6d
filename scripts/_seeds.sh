# shellcheck shell=bash disable=SC2034,SC2154  # its variables are its interface with the scripts
# Shared by scripts/run.sh and scripts/run_cluster.sh: the seeds' command lines
# (the MindSpore distributed-training tutorial) on top of dlaunch.
#
# Layout of per-device logs, as the seeds left them, without their rm -rf:
#   device$i  -> dlaunch_runs/<run id>/rank_NNN     (a symlink in the current directory)
#   rank_NNN/train.log$i -> output.log, env$i.log -> env.log   (symlinks dlaunch's rank directory gains)
# An old symlink named device$i is replaced; a real file or directory of that name
# (say, from the seeds' own run.sh) is left alone with a warning.

seeds_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

seeds_die() {
  echo "$seeds_prog: error: $*" >&2
  exit 2
}

# seeds_dlaunch: the array `dlaunch`: $DLAUNCH (split at whitespace), else this
# checkout's .venv, else dlaunch on PATH.
seeds_dlaunch() {
  if [ -n "${DLAUNCH:-}" ]; then
    read -r -a dlaunch <<< "$DLAUNCH"
  elif [ -x "$seeds_root/.venv/bin/dlaunch" ]; then
    dlaunch=("$seeds_root/.venv/bin/dlaunch")
  elif command -v dlaunch > /dev/null; then
    dlaunch=(dlaunch)
  else
    seeds_die "dlaunch not found: run scripts/demo.sh once (it makes .venv), pip install dlaunch, or set DLAUNCH"
  fi
}

# seeds_absolute PATH: PATH made absolute (ranks run in their own directories).
seeds_absolute() {
  case $1 in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$PWD/$1" ;;
  esac
}

# seeds_split_args ARGS...: the dlaunch options after the positional arguments into
# `options`, script arguments after -- into `script_args` (has_script_args=1 when --
# was given); --run-id and --output-dir are taken out, into run_id and output_dir,
# because this script must know where the run directory will be. Without --run-id the
# run id is seeds_job_name (run_cluster.sh's JOB_NAME), else slurm-$SLURM_JOB_ID, else
# the time and this script's pid.
seeds_split_args() {
  options=()
  script_args=()
  has_script_args=0
  run_id=""
  output_dir=${DLAUNCH_OUTPUT_DIR:-dlaunch_runs}
  while [ $# -gt 0 ]; do
    case $1 in
      --)
        shift
        script_args=("$@")
        has_script_args=1
        break
        ;;
      --run-id | --output-dir)
        [ $# -ge 2 ] || seeds_die "$1 needs a value"
        if [ "$1" = --run-id ]; then run_id=$2; else output_dir=$2; fi
        shift 2
        ;;
      --run-id=*) run_id=${1#*=}; shift ;;
      --output-dir=*) output_dir=${1#*=}; shift ;;
      *) options+=("$1"); shift ;;
    esac
  done
  if [ -z "$run_id" ]; then
    if [ -n "${seeds_job_name:-}" ]; then
      run_id=$seeds_job_name
    elif [[ ${SLURM_JOB_ID:-} =~ ^[0-9]+$ ]]; then
      run_id=slurm-$SLURM_JOB_ID
    else
      run_id=$(date +%Y%m%d-%H%M%S)-p$$
    fi
  fi
  run_dir=$output_dir/$run_id
}

# seeds_rank_dir RANK WORLD_SIZE: the rank's directory in the run, as dlaunch names it.
seeds_rank_dir() {
  printf '%s/rank_%0*d\n' "$run_dir" "$(seeds_width "$2")" "$1"
}

# seeds_width WORLD_SIZE: digits in a rank directory's number (at least 3).
seeds_width() {
  local last=$(($1 - 1))
  local width=${#last}
  [ "$width" -ge 3 ] || width=3
  printf '%s\n' "$width"
}

# seeds_link NAME TARGET: ./NAME becomes a symlink to TARGET, replacing only an old symlink.
seeds_link() {
  if [ -L "$1" ] || [ ! -e "$1" ]; then
    ln -sfn "$2" "$1"
  else
    echo "$seeds_prog: warning: $1 is not a symlink (left from an older run?): left as it is;" \
      "this run's files are in $2" >&2
  fi
}

# seeds_link_logs WORLD_SIZE WAIT NAME_PATTERN... -- RANK...: in each rank's directory, once
# dlaunch has made it, NAME -> output.log for the first pattern and -> env.log for the
# second; @ in a pattern is the rank. WAIT=1 waits for the directories while this
# script's process lives; WAIT=0 links those that exist.
seeds_link_logs() {
  local world=$1 wait=$2 patterns=() rank dir
  shift 2
  while [ "$1" != -- ]; do
    patterns+=("$1")
    shift
  done
  shift
  for rank in "$@"; do
    dir=$(seeds_rank_dir "$rank" "$world")
    while [ "$wait" = 1 ] && [ ! -d "$dir" ]; do
      kill -0 "$seeds_pid" 2> /dev/null || return 0
      sleep 0.1
    done
    [ -d "$dir" ] || continue
    ln -sfn output.log "$dir/${patterns[0]//@/$rank}"
    [ ${#patterns[@]} -lt 2 ] || ln -sfn env.log "$dir/${patterns[1]//@/$rank}"
  done
}

# seeds_launch DEVICE_PREFIX WORLD_SIZE PATTERNS... -- RANKS... -- DLAUNCH_ARGS...: link this
# host's device directories (DEVICE_PREFIX<rank>), run dlaunch in the foreground (so Ctrl-C and signals reach it
# as usual), link each rank's log as soon as its directory exists; exit with dlaunch's code.
seeds_launch() {
  local prefix=$1 world=$2 link_args=() ranks=() rank status poller
  shift 2
  while [ "$1" != -- ]; do
    link_args+=("$1")
    shift
  done
  shift
  while [ "$1" != -- ]; do
    ranks+=("$1")
    shift
  done
  shift
  seeds_pid=$$
  for rank in "${ranks[@]}"; do
    seeds_link "$prefix$rank" "$(seeds_rank_dir "$rank" "$world")"
  done
  seeds_link_logs "$world" 1 "${link_args[@]}" -- "${ranks[@]}" &
  poller=$!
  echo "$seeds_prog: $(printf '%q ' "${dlaunch[@]}" "$@")"
  echo "$seeds_prog: run directory $run_dir; per-device logs $prefix<rank>/"
  set +e
  "${dlaunch[@]}" "$@"
  status=$?
  set -e
  kill "$poller" 2> /dev/null || true
  wait "$poller" 2> /dev/null || true
  seeds_link_logs "$world" 0 "${link_args[@]}" -- "${ranks[@]}"
  if [ "$status" -eq 0 ]; then
    echo "training success"
  else
    echo "training failed (dlaunch exit code $status)"
  fi
  return "$status"
}
