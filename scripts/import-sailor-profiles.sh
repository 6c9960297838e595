#!/usr/bin/env bash
# Regenerates profiles/opt-350m/*.profile.yaml from the public Sailor measurements
# (peer-data/sailor, MIT licence; the Sailor format, which has forward and backward apart).
# The importer checks configs/models/opt-350m.yaml against the peer data's misc/.
# Usage: scripts/import-sailor-profiles.sh [PEER_DATA_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
peer="${1:-../shared/peer-data/sailor}"
hetplan="${HET_BUILD_DIR:-build}/apps/hetplan/hetplan"
mkdir -p profiles/opt-350m
for gpu in A100-40 A100-80 V100-16 GH-96 RTX-3090; do
  out="profiles/opt-350m/$(echo "$gpu" | tr 'A-Z' 'a-z').profile.yaml"
  "$hetplan" profile import --from sailor "$peer/sailor_planner/profiles/OPT-350/$gpu" \
    --model configs/models/opt-350m.yaml --llm-info "$peer/misc/llm_info.json" -o "$out"
done
