#!/usr/bin/env bash
# Redraws the pictures in docs/ with `hetplan show` and headless Chromium (the same check the
# tests run: tests/browser_render_check.py):
#   docs/plan-example.svg, .png      HAPT's GPT-15B on 4x8 A100 + 4x8 V100 (64 devices)
#   docs/plan-example-736.png        HetAuto's exp3, Llama 96 layers on 736 devices
# from the plans in docs/examples/ (made by `hetplan search --time-budget 20` and `10`).
#   HETPLAN  the hetplan binary (default: build/apps/hetplan/hetplan)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hetplan="${HETPLAN:-build/apps/hetplan/hetplan}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
python3 tests/browser_render_check.py --hetplan "$hetplan" --keep "$out" \
  docs/examples/hapt-gpt-15b.plan.json docs/examples/hetauto-exp3.plan.json
cp "$out/hapt-gpt-15b.svg" docs/plan-example.svg
cp "$out/hapt-gpt-15b.png" docs/plan-example.png
cp "$out/hetauto-exp3.png" docs/plan-example-736.png
echo "wrote docs/plan-example.svg, docs/plan-example.png, docs/plan-example-736.png"
