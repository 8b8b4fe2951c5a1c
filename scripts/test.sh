#!/usr/bin/env bash
# Every test: the release build's suites, then one clang ASan+UBSan build that runs the unit suites
# again and each fuzz target for a bounded time. Fails when anything fails. FUZZ_SECONDS sets the
# per-target time.
#
# The release build has the CUDA backend wherever nvcc is found (CMakeLists.txt detects it; sm_90a
# and sm_100a): its GPU tests (ctest label gpu, tests/cuda) skip here without a device, and
# scripts/test-gpu.sh runs them on the device machine. The sanitizer build is CPU-only
# (-DDEEPINFER_CUDA=OFF): nvcc takes no sanitizer or libFuzzer flags.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-10}
# Each stage's start, with the seconds since the script began (CI's budget is 30 minutes).
stage() { echo "== $1 [$(date -u +%H:%M:%S), ${SECONDS}s in]"; }

stage "release build and tests (GPU tests skip without a device)"
# Without bench/ when this configures the tree (CI's fresh clone): the benchmarks are a minute of
# CI's two cores and no test runs them. `cmake -B build -DDEEPINFER_BENCH=ON` turns them back on
# (scripts/test-gpu.sh pack does, for the device ones); a tree that scripts/run.sh configured has them.
scripts/build.sh build -DDEEPINFER_BENCH=OFF
ctest --test-dir build --output-on-failure -j "$jobs"

# One clang build serves the sanitizer stage's two halves: the unit suites and the fuzz targets
# (DEEPINFER_FUZZ adds libFuzzer's coverage to every object; only fuzz/ links libFuzzer's main).
# Only what this stage runs: the unit suites and the fuzz targets (the CLI and its end-to-end
# tests ran in the release build). Line tables instead of full debug info (-g) still give the
# sanitizers' reports file:line and cut the compile by a tenth; lld links the ~20 instrumented
# executables in a fraction of GNU ld's time.
stage "sanitizer build (clang, ASan+UBSan, -O1): unit tests and fuzz targets"
if [ ! -f build-san/build.ninja ]; then
  cmake -S . -B build-san -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG= -DCMAKE_CXX_FLAGS_DEBUG= \
    "-DCMAKE_C_FLAGS=-O1 -gline-tables-only" "-DCMAKE_CXX_FLAGS=-O1 -gline-tables-only" \
    -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld \
    -DDEEPINFER_SANITIZE=address,undefined -DDEEPINFER_FUZZ=ON -DDEEPINFER_BENCH=OFF -DDEEPINFER_CUDA=OFF
fi
mapfile -t san_targets < <(ninja -C build-san -t targets all | sed -n -E 's/^((test|fuzz)_[a-z0-9_]+): phony$/\1/p')
cmake --build build-san --parallel "$jobs" --target "${san_targets[@]}"

stage "unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-san --output-on-failure -j "$jobs" -L unit

# The targets run $jobs at a time (each is one thread), each into its own log, shown when it ends.
stage "fuzz targets, ${fuzz_seconds}s each, $jobs at a time"
fuzz_logs=$(mktemp -d)
fuzz_one() {
  local target=$1 name work status=0
  name=$(basename "$target")
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$name/." "$work/" 2>/dev/null || true
  "$target" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 "$work" >"$fuzz_logs/$name.log" 2>&1 || status=$?
  rm -rf "$work"
  return "$status"
}
targets=()
for target in build-san/fuzz/fuzz_*; do [ -x "$target" ] && targets+=("$target"); done
failed=()
for ((first = 0; first < ${#targets[@]}; first += jobs)); do
  batch=("${targets[@]:first:jobs}")
  pids=()
  for target in "${batch[@]}"; do
    fuzz_one "$target" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    name=$(basename "${batch[$i]}")
    if wait "${pids[$i]}"; then
      echo "-- $name"
      tail -n 12 "$fuzz_logs/$name.log"
    else
      echo "-- $name FAILED"
      tail -n 60 "$fuzz_logs/$name.log"
      failed+=("$name")
    fi
  done
done
rm -rf "$fuzz_logs"
if [ ${#failed[@]} -gt 0 ]; then
  echo "== fuzz targets failed: ${failed[*]}"
  exit 1
fi
stage "all tests passed"
