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
fuzz_seconds=${FUZZ_SECONDS:-30}

echo "== release build and tests (GPU tests skip without a device)"
scripts/build.sh build
ctest --test-dir build --output-on-failure -j "$jobs"

# One clang build serves the sanitizer stage's two halves: the unit suites and the fuzz targets
# (DEEPINFER_FUZZ adds libFuzzer's coverage to every object; only fuzz/ links libFuzzer's main).
echo "== sanitizer build (clang, ASan+UBSan, -O1): unit tests and fuzz targets"
scripts/build.sh build-san -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 \
  -DDEEPINFER_SANITIZE=address,undefined -DDEEPINFER_FUZZ=ON -DDEEPINFER_BENCH=OFF -DDEEPINFER_CUDA=OFF

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-san --output-on-failure -j "$jobs" -L unit

echo "== fuzz targets, ${fuzz_seconds}s each"
for target in build-san/fuzz/fuzz_*; do
  [ -x "$target" ] || continue
  name=$(basename "$target")
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$name/." "$work/" 2>/dev/null || true
  echo "-- $name"
  "$target" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 "$work" 2>&1 | tail -n 12
  rm -rf "$work"
done
echo "== all tests passed"
