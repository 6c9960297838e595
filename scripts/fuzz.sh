#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/, clang with ASan and UBSan; only they and the
# libraries they link), seeds a corpus per harness from the shipped files, and runs each harness
# in turn for a while. Prints a table (harness, seconds, executions, exec/s, corpus, peak RSS,
# result) and exits 1 when a harness crashed, hung (an input ran past --timeout) or ran out of
# memory; the input that did it is kept in BUILD_DIR/artifacts/HARNESS/. Exits 77 (skipped) when
# clang or libFuzzer's runtime is missing. docs/fuzzing.md says what each harness feeds and checks.
#   scripts/fuzz.sh [--smoke] [--seconds N] [--only H1,H2] [--build-dir DIR] [--jobs J]
#                   [--timeout S] [--rss-limit-mb M] [--opt 0|1] [--format table|json]
#     --smoke         a short run of each (15 s); ctest -L fuzz runs it with --opt 0
#     --seconds N     each harness runs N seconds (default 60)
#     --only H1,H2    these harnesses only (input model cluster catalog profile plan importer
#                     worker_job agent)
#     --build-dir DIR the clang build (default: build-fuzz); its corpus/ grows from run to run
#     --jobs J        build jobs (default: nproc)
#     --timeout S     an input running longer than S seconds is a hang (default 25)
#     --rss-limit-mb  the memory a harness may hold (default 2048)
#     --opt 0|1       the build's -O level: 1 (default) fuzzes about twice as fast, 0 builds in
#                     two thirds of the time (CI's smoke, where the build is most of the time)
#   Reproduce a kept input: BUILD_DIR/tests/fuzz/fuzz_HARNESS FILE
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
src="$PWD"

all=(input model cluster catalog profile plan importer worker_job agent checkpoint)
seconds=60 only="" build="build-fuzz" jobs="$(nproc)" timeout=25 rss=2048 opt=1 format=table
while (( $# )); do
  case "$1" in
    --smoke) seconds=15 ;;
    --seconds) seconds="$2"; shift ;;
    --only) only="$2"; shift ;;
    --build-dir) build="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    --timeout) timeout="$2"; shift ;;
    --rss-limit-mb) rss="$2"; shift ;;
    --opt) opt="$2"; shift ;;
    --format) format="$2"; shift ;;
    *) echo "fuzz.sh: unknown argument '$1' (see the top of scripts/fuzz.sh)" >&2; exit 2 ;;
  esac
  shift
done
harnesses=("${all[@]}")
[[ -n "$only" ]] && IFS=, read -r -a harnesses <<< "$only"
for h in "${harnesses[@]}"; do
  [[ " ${all[*]} " == *" $h "* ]] || { echo "fuzz.sh: no harness '$h' (${all[*]})" >&2; exit 2; }
done
log() { echo "fuzz: $*" >&2; }

# ---- clang and libFuzzer (packages clang and libclang-rt-14-dev: scripts/setup.sh) ----------
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
if ! command -v clang++ > /dev/null; then
  echo "fuzz: skipped: clang++ is not installed (Debian: apt-get install clang libclang-rt-14-dev)"
  exit 77
fi
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2> "$probe/err"; then
  echo "fuzz: skipped: clang++ cannot link a libFuzzer harness (Debian: apt-get install libclang-rt-14-dev):"
  sed 's/^/  /' "$probe/err" | head -5
  exit 77
fi

# ---- build ----------------------------------------------------------------------------------
start=$SECONDS
[[ "$opt" =~ ^[01]$ ]] || { echo "fuzz.sh: --opt is 0 or 1" >&2; exit 2; }
# Asserts on (no NDEBUG); line tables for the sanitizers' stack traces.
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DHET_FUZZ=ON -DHET_CUDA=OFF -DBUILD_TESTING=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O$opt -gline-tables-only" > "$probe/cmake.log" ||
  { cat "$probe/cmake.log"; exit 1; }
cmake --build "$build" --target het_fuzzers -j "$jobs" > "$probe/build.log" || { tail -50 "$probe/build.log"; exit 1; }
log "built in $((SECONDS - start)) s"

# ---- seeds: the shipped files each harness reads --------------------------------------------
# One directory per run, so that two runs on one build (two harnesses side by side) do not remove
# each other's seeds (they did: "rm: cannot remove .../seeds/catalog: Directory not empty").
seeds="$(mktemp -d "$build/seeds.XXXXXX")"
trap 'rm -rf "$probe" "$seeds"' EXIT
mkdir -p "$seeds"/{input,model,cluster,catalog,profile,plan,importer}
cp configs/models/*.yaml "$seeds/model/"
cp configs/clusters/*.yaml tests/data/*.yaml tests/data/agents/cluster.yaml "$seeds/cluster/"
cp configs/devices.yaml "$seeds/catalog/"
cp profiles/*/*.yaml docs/examples/*.profile.yaml "$seeds/profile/"
for f in tests/data/plans/*.json tests/data/agents/plan.json docs/examples/*.plan.json; do
  cp "$f" "$seeds/plan/$(echo "$f" | tr / _)"
done
for d in model cluster catalog profile plan; do cp "$seeds/$d"/* "$seeds/input/"; done
# The importer's first byte picks the file the rest replaces (tests/fuzz/importer.cpp).
peer=tests/data/sailor
{ printf '\0'; cat $peer/sailor_planner/profiles/OPT-350/A100-40/profile.json; } > "$seeds/importer/sailor.json"
for f in $peer/baselines/Metis/profiles/OPT-350/A100-40/*.json; do
  { printf '\1'; cat "$f"; } > "$seeds/importer/metis-$(basename "$f")"
done
{ printf '\2'; cat $peer/misc/llm_info.json; } > "$seeds/importer/llm_info.json"
{ printf '\3'; cat $peer/misc/training_config_opt_350.json; } > "$seeds/importer/training_config.json"
"$build/tests/fuzz/fuzz_seeds" "$seeds"  # agent/, worker_job/ and checkpoint/

# ---- runs -----------------------------------------------------------------------------------
# ASan's default quarantine (256 MiB of freed memory held back to catch a use after free) let a
# harness's RSS grow by ~50 MiB a minute without a leak (LSan found none; 1 GiB after 10 minutes),
# so that an hour's run would end in a false out-of-memory. With 64 MiB it grew ~200 MiB in 10
# minutes, slowing; the last 64 MiB of frees are still checked.
export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=64}"
results=()
failed=0
for h in "${harnesses[@]}"; do
  corpus="$build/corpus/$h" artifacts="$build/artifacts/$h" logfile="$build/logs/$h.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$logfile")"
  args=(-max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb="$rss" -print_final_stats=1
        -artifact_prefix="$artifacts/")
  [[ "$h" =~ ^(input|model|cluster|catalog|profile|plan)$ ]] && args+=(-dict="$src/tests/fuzz/yaml.dict")
  log "$h: ${seconds} s"
  rc=0
  t0=$SECONDS
  nice -n 10 "$build/tests/fuzz/fuzz_$h" "${args[@]}" "$corpus" "$seeds/$h" > "$logfile" 2>&1 || rc=$?
  took=$((SECONDS - t0))
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$logfile" | tail -1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logfile" | tail -1)"
  corp="$(grep -o 'corp: [0-9]*' "$logfile" | tail -1 | cut -d' ' -f2)"
  peak="$(sed -n 's/^stat::peak_rss_mb: *//p' "$logfile" | tail -1)"
  if (( rc == 0 )); then
    result=ok
  else
    failed=1
    if grep -q 'ERROR: libFuzzer: timeout' "$logfile"; then result=timeout
    elif grep -q 'ERROR: libFuzzer: out-of-memory' "$logfile"; then result=out-of-memory
    elif grep -q 'ERROR: LeakSanitizer' "$logfile"; then result=leak
    else result=crash; fi
    unit="$(sed -n 's/.*Test unit written to //p' "$logfile" | tail -1)"
    log "$h: $result (exit $rc); input kept: ${unit:-none}; log: $logfile"
    grep -m1 -A12 -E '^==[0-9]+==ERROR|^fuzz: property|runtime error|ERROR: libFuzzer' "$logfile" | sed 's/^/  /' >&2 || true
    result="$result ${unit:-}"
  fi
  results+=("$h|$took|${execs:-0}|${rate:-0}|${corp:-0}|${peak:-0}|$result")
done

if [[ "$format" == json ]]; then
  printf '['
  sep=""
  for r in "${results[@]}"; do
    IFS='|' read -r h s e x c m res <<< "$r"
    printf '%s\n {"harness": "%s", "seconds": %s, "executions": %s, "exec_per_s": %s, "corpus": %s, "peak_rss_mb": %s, "result": "%s"}' \
      "$sep" "$h" "$s" "$e" "$x" "$c" "$m" "$res"
    sep=","
  done
  printf '\n]\n'
else
  printf '%-11s %8s %12s %8s %7s %7s  %s\n' harness seconds executions exec/s corpus rss_MB result
  for r in "${results[@]}"; do
    IFS='|' read -r h s e x c m res <<< "$r"
    printf '%-11s %8s %12s %8s %7s %7s  %s\n' "$h" "$s" "$e" "$x" "$c" "$m" "$res"
  done
fi
log "done in $((SECONDS - start)) s"
exit "$failed"
