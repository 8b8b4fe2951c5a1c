#!/usr/bin/env bash
# Every test: the release build's suites, the unit suites again under ASan+UBSan, and each fuzz
# target for a bounded time. Fails when anything fails. FUZZ_SECONDS sets the per-target time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-30}

echo "== release build and tests"
scripts/build.sh build
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DDEEPINFER_SANITIZE=address,undefined \
  -DDEEPINFER_BENCH=OFF -DCMAKE_CXX_FLAGS=-O1
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit

echo "== fuzz targets, ${fuzz_seconds}s each"
scripts/build.sh build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_FUZZ=ON -DDEEPINFER_TESTS=OFF -DDEEPINFER_BENCH=OFF \
  -DDEEPINFER_SANITIZE=address,undefined,fuzzer-no-link
for target in build-fuzz/fuzz/fuzz_*; do
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
