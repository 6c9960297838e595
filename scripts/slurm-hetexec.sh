#!/usr/bin/env bash
# Runs a plan on a Slurm allocation: one `hetexec agent` per allocated node, then one submit.
#   sbatch --nodes=4 scripts/slurm-hetexec.sh PLAN NODES...
# NODES are the plan's node ids in the allocation's host order (scontrol show hostnames), e.g.
#   sbatch --nodes=4 scripts/slurm-hetexec.sh plan.json a100/0 a100/1 v100/0 v100/1
# Environment: HETEXEC (the binary, default hetexec on PATH), HETEXEC_DEVICES (default cuda:all),
# HETEXEC_PORT (default 7100), HETEXEC_TOKEN_FILE (default: a fresh token in $HOME/.hetexec),
# HETEXEC_SUBMIT_ARGS (extra `hetexec submit` arguments, e.g. "--steps 1000 --data /data/train.bin").
#SBATCH --job-name=hetexec
#SBATCH --ntasks-per-node=1
set -euo pipefail
plan="$1"; shift
hetexec="${HETEXEC:-hetexec}"
port="${HETEXEC_PORT:-7100}"
devices="${HETEXEC_DEVICES:-cuda:all}"
mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
if (( ${#hosts[@]} != $# )); then
  echo "error: the allocation has ${#hosts[@]} nodes, ${#} node ids were given" >&2
  exit 2
fi
token="${HETEXEC_TOKEN_FILE:-$HOME/.hetexec/token-$SLURM_JOB_ID}"
if [[ ! -s "$token" ]]; then
  mkdir -p "$(dirname "$token")"
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$token")
fi
# One agent per node, each told which of the plan's nodes it is and its own address.
agents=()
for i in "${!hosts[@]}"; do
  host="${hosts[$i]}"
  node="${@:$((i + 1)):1}"
  addr=$(getent ahostsv4 "$host" | awk 'NR == 1 {print $1}')
  srun --nodes=1 --ntasks=1 -w "$host" --kill-on-bad-exit=1 \
    "$hetexec" agent --listen "0.0.0.0:$port" --node "$node" --devices "$devices" \
      --advertise "$addr" --token-file "$token" &
  agents+=("$node=$addr:$port")
done
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
sleep 3  # the agents come up
here=$(getent ahostsv4 "$(hostname)" | awk 'NR == 1 {print $1}')
list=$(IFS=,; echo "${agents[*]}")
# shellcheck disable=SC2086
"$hetexec" submit "$plan" --agents "$list" --token-file "$token" \
  --rendezvous-listen "0.0.0.0:0" --rendezvous-advertise "$here" ${HETEXEC_SUBMIT_ARGS:-}
