#!/usr/bin/env bash
# Run `drl train` or `drl tune` on a Ray cluster started under Slurm: the Ray head on the job's
# first node, a Ray worker on each other node, then the drl command on the head, where this batch
# script runs. Usage:
#
#   sbatch --nodes=2 --gpus-per-node=4 scripts/slurm/ray_cluster.sh train configs/hopper_ppo.yaml
#   sbatch --nodes=4 scripts/slurm/ray_cluster.sh tune configs/hopper_ppo.yaml space.yaml
#   scripts/slurm/ray_cluster.sh --dry-run train configs/hopper_ppo.yaml   # print, run nothing
#
# --dry-run prints the commands the job would run, one per line (inside an allocation, or with
# SLURM_JOB_NODELIST set by hand): it queries scontrol and srun for the node names and the head's
# address, and starts nothing.
#
# Stopping: scancel, or the time limit (--signal below: SIGTERM 120 s before it), reaches drl as
# SIGTERM; it finishes the round in progress, keeps its checkpoints and prints how to resume. On
# any exit (drl done or failed, a signal) the Ray processes of every node are stopped.
#
# Environment: DRL_VENV (default .venv) is activated on every node; RAY_PORT (default 6379);
# RAY_HEAD_WAIT_S (default 60): how long the head may take to accept connections;
# RAY_WORKER_WAIT_S (default 10): the pause for the workers to join before drl starts.
#SBATCH --job-name=drl
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --signal=B:TERM@120
#SBATCH --output=drl-%j.log
set -euo pipefail

usage="usage: sbatch scripts/slurm/ray_cluster.sh [--dry-run] train|tune ARGS..."
dry_run=0
if [[ ${1:-} == --dry-run ]]; then
  dry_run=1
  shift
fi
drl_command=${1:-}
case "$drl_command" in
  train | tune) shift ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac
if (($# == 0)); then
  echo "$usage" >&2
  exit 2
fi
if [[ -z ${SLURM_JOB_NODELIST:-} ]]; then
  echo "error: SLURM_JOB_NODELIST is not set: submit with sbatch (or run inside salloc)" >&2
  exit 2
fi

venv=${DRL_VENV:-.venv}
port=${RAY_PORT:-6379}
head_wait_s=${RAY_HEAD_WAIT_S:-60}
worker_wait_s=${RAY_WORKER_WAIT_S:-10}
export RAY_USAGE_STATS_ENABLED=0

# A command as one line of shell: arguments quoted where they need it.
quoted() {
  local arg words=()
  for arg; do
    if [[ $arg =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
      words+=("$arg")
    else
      words+=("$(printf '%q' "$arg")")
    fi
  done
  echo "${words[*]}"
}

# Prints a command under --dry-run; runs it otherwise.
run() {
  if ((dry_run)); then
    quoted "$@"
  else
    "$@"
  fi
}

# Like run, in the background; the PIDs are stopped at exit.
background_pids=()
start() {
  if ((dry_run)); then
    echo "$(quoted "$@") &"
  else
    "$@" &
    background_pids+=("$!")
  fi
}

mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head_node=${nodes[0]}
head_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk '{print $1}')
address="$head_ip:$port"
cpus=${SLURM_CPUS_ON_NODE:-$(nproc)}
gpus=${SLURM_GPUS_ON_NODE:-0}
all_nodes=$(
  IFS=,
  echo "${nodes[*]}"
)

drl_pid=
teardown() {
  local status=$?
  trap - EXIT INT TERM
  echo "stopping ray on ${#nodes[@]} nodes" >&2
  # A step of its own beside the running ones (--overlap); during scancel Slurm may refuse new
  # steps, and then ends the ray processes with the job's own.
  local stop=(srun --overlap --nodes="${#nodes[@]}" --ntasks-per-node=1 -w "$all_nodes"
    ray stop --force)
  if ((dry_run)); then
    run "${stop[@]}"
  else
    "${stop[@]}" >/dev/null 2>&1 || true
  fi
  if ((${#background_pids[@]})); then
    kill -TERM "${background_pids[@]}" 2>/dev/null || true
    wait "${background_pids[@]}" 2>/dev/null || true
  fi
  exit "$status"
}
# SIGTERM (scancel, the time limit) and Ctrl-C under salloc: drl gets SIGTERM first and is
# waited for (it keeps its checkpoints), then the cluster stops; 143 / 130 as the shell's own.
stop_on_signal() {
  if [[ -n $drl_pid ]]; then
    kill -TERM "$drl_pid" 2>/dev/null || true
    wait "$drl_pid" || true
  fi
  exit "$1"
}
trap 'stop_on_signal 143' TERM
trap 'stop_on_signal 130' INT
trap teardown EXIT

run source "$venv/bin/activate"

echo "ray head on $head_node ($address), ${#nodes[@]} nodes" >&2
start srun --nodes=1 --ntasks=1 -w "$head_node" \
  ray start --head --node-ip-address="$head_ip" --port="$port" \
  --num-cpus="$cpus" --num-gpus="$gpus" --include-dashboard=false --block
if ((dry_run)); then
  echo "# wait up to ${head_wait_s} s for $address to accept connections"
else
  deadline=$((SECONDS + head_wait_s))
  until (exec 3<>"/dev/tcp/$head_ip/$port") 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      echo "error: the ray head on $head_node did not accept connections on $address within ${head_wait_s} s (RAY_HEAD_WAIT_S)" >&2
      exit 1
    fi
    sleep 1
  done
fi
for node in "${nodes[@]:1}"; do
  start srun --nodes=1 --ntasks=1 -w "$node" \
    ray start --address="$address" --num-cpus="$cpus" --num-gpus="$gpus" --block
done
if ((${#nodes[@]} > 1)); then
  run sleep "$worker_wait_s"
fi

if ((dry_run)); then
  run drl "$drl_command" "$@" --address "$address" --quiet
  exit 0
fi
drl "$drl_command" "$@" --address "$address" --quiet &
drl_pid=$!
# wait returns at once when a trapped signal arrives; the trap then waits for drl itself.
wait "$drl_pid"
