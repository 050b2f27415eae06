#!/usr/bin/env bash
# Train on a Ray cluster started under Slurm: Ray head on the first node, workers on the rest,
# then `drl train --address` on the head. Usage:
#
#   sbatch --nodes=2 --gpus-per-node=4 scripts/slurm/train_ray_cluster.sh configs/hopper_ppo.yaml
#
# Environment: DRL_VENV (default .venv) is activated on every node; RAY_PORT (default 6379).
#SBATCH --job-name=drl-train
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --output=drl-train-%j.log
set -euo pipefail

config=${1:?usage: sbatch scripts/slurm/train_ray_cluster.sh CONFIG [drl train options]}
shift
venv=${DRL_VENV:-.venv}
port=${RAY_PORT:-6379}
export RAY_USAGE_STATS_ENABLED=0
# shellcheck disable=SC1091
source "$venv/bin/activate"

mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head_node=${nodes[0]}
head_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk '{print $1}')
address="$head_ip:$port"
cpus=${SLURM_CPUS_ON_NODE:-$(nproc)}
gpus=${SLURM_GPUS_ON_NODE:-0}

echo "ray head on $head_node ($address), ${#nodes[@]} nodes"
srun --nodes=1 --ntasks=1 -w "$head_node" \
  ray start --head --node-ip-address="$head_ip" --port="$port" \
  --num-cpus="$cpus" --num-gpus="$gpus" --include-dashboard=false --block &
sleep 10
for node in "${nodes[@]:1}"; do
  srun --nodes=1 --ntasks=1 -w "$node" \
    ray start --address="$address" --num-cpus="$cpus" --num-gpus="$gpus" --block &
done
sleep 10

status=0
drl train "$config" --address "$address" --quiet "$@" || status=$?
ray stop --force || true
exit "$status"
