#!/usr/bin/env bash
# HAPT §2.2.2 case study: simulates the 8-unit and 128-unit plans of Table 1 (docs/case-study-hapt.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hetplan="${HET_BUILD_DIR:-build}/apps/hetplan/hetplan"
for n in 8 128; do
  echo "== $n units"
  "$hetplan" simulate "docs/examples/hapt-case-study-$n.plan.json" \
    --model configs/models/hapt-case-study-gpt-128l.yaml \
    --cluster configs/clusters/hapt-case-study-2x2a100-1x2v100.yaml
done
