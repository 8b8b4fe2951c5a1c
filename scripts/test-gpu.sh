#!/usr/bin/env bash
# Every GPU test, on the device machine (an H200 box). Two modes:
#
#   scripts/test-gpu.sh pack        here, on the build machine: build what the bundle holds in `build`
#                                   (scripts/build.sh build; CUDA on, sm_90a + sm_100a) and put
#                                   what the GPU tests run into .gpu-bundle/ (gitignored)
#   scripts/test-gpu.sh run [ARGS]  on the device, in the repository root with .gpu-bundle/
#                                   carried there: run .gpu-bundle/test_cuda (ARGS go to it, e.g.
#                                   --gtest_filter=...), the engine suite on the GPU
#                                   (DEEPINFER_TEST_DEVICE=cuda test_engine), then the CLI smoke
#                                   test (greedy generate on --device cuda must give --device
#                                   cpu's ids, on V4 and V4.1 golden checkpoints), and print a
#                                   one-screen summary. Exits non-zero on any failure.
#
# Why this way: the device machine has nvcc, cmake, ninja and python3 but none of the project's
# Debian libraries (libpcre2, libutf8proc, cpp-httplib, GoogleTest, ...) and no network, so the
# tree cannot be configured there. So the binaries are built here, where scripts/setup.sh has
# installed everything, and carried over with every shared library `ldd` names for them, except
# those the device has its own, matching copies of: glibc (libc, libm, ld-linux, ...), libstdc++,
# libgcc_s and the CUDA driver (libcuda, which the static CUDA runtime loads at run time). The
# binaries are stripped, keeping the bundle small (a carry holds 64 MiB in all; `pack` prints its
# size and refuses above 60 MiB). Test data and assets are not bundled: they are tracked files and
# travel with the working tree; `run` points the binaries at them through DEEPINFER_TEST_DATA_DIR
# and DEEPINFER_ASSET_DIR (the compiled-in paths name this machine's checkout, which the device
# does not have). As a fallback only, pack also keeps this machine's libstdc++ and libgcc_s in
# .gpu-bundle/compat: run puts them on the library path when the device's own copies are older
# than the binaries need (ldd reports a missing GLIBCXX_/CXXABI_/GCC_ version).
#
# From a session with the device tool: run `scripts/test-gpu.sh pack` here, then on the device
# `scripts/test-gpu.sh run` with carry [".gpu-bundle"]. The tool sends at most 64 MiB of working
# tree and carry together, and the tracked tree is larger (the embedded model alone is 40 MB), so
# the smoke tests use the golden checkpoints under tests/data, and a session may have to leave
# the embedded model, the tokenizer-parity corpus and the V3 tokenizer out of what travels
# (untrack them for the call and restore them after; they are not read here). Results (gtest JSON, logs) go to $OUT
# when it is set (the device tool brings that folder back), else .gpu-bundle/results.
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=.gpu-bundle
size_limit_mib=60

usage() {
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

# The libraries of `ldd BINARY` that the bundle carries: everything resolved except glibc's,
# libstdc++, libgcc_s and the CUDA driver's.
bundled_libraries() {
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r path; do
    case $(basename "$path") in
      libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
        libutil.so.* | ld-linux*.so.* | libstdc++.so.* | libgcc_s.so.* | libcuda.so.* | libnvidia-*) ;;
      # cuBLASLt (cuda_gemm_bench only) is ~540 MB, past any carry: the device's CUDA 13 has it.
      libcublas.so.* | libcublasLt.so.*) ;;
      *) echo "$path" ;;
    esac
  done
}

pack() {
  local missing
  # Only what the bundle holds is built (the first time, build.sh configures and builds the tree).
  [ -f build/build.ninja ] || scripts/build.sh build
  # scripts/test.sh configures build/ without bench/; the bundle carries the device benchmarks.
  if grep -q '^DEEPINFER_BENCH:BOOL=OFF' build/CMakeCache.txt; then
    cmake -B build -DDEEPINFER_BENCH=ON >/dev/null
  fi
  local targets=(test_cuda test_engine deepinfer)
  local benches=(decode_step_bench cuda_gemm_bench cuda_moe_bench)
  cmake --build build --parallel "$(nproc)" --target "${targets[@]}" "${benches[@]}"
  if ! grep -q '^DEEPINFER_CUDA:BOOL=ON' build/CMakeCache.txt; then
    echo "test-gpu pack: build/ was configured without the CUDA backend (DEEPINFER_CUDA is off: was nvcc" >&2
    echo "  on PATH?). Reconfigure it: rm -rf build && scripts/build.sh build" >&2
    exit 1
  fi
  if [ ! -x build/tests/test_cuda ]; then
    echo "test-gpu pack: build/tests/test_cuda was not built (no tests/cuda/*.cpp yet?)" >&2
    exit 1
  fi
  rm -rf "$bundle"
  mkdir -p "$bundle/lib" "$bundle/compat"
  local binaries=(build/tests/test_cuda build/tests/test_engine build/deepinfer)
  # The device benchmarks, beside the tests (docs/BENCHMARKS.md runs them from the bundle).
  for binary in "${benches[@]}"; do [ -x "build/bench/$binary" ] && binaries+=("build/bench/$binary"); done
  for binary in "${binaries[@]}"; do
    cp "$binary" "$bundle/"
    strip --strip-unneeded "$bundle/$(basename "$binary")"
    missing=$(ldd "$binary" 2>&1 | grep 'not found' || true)
    if [ -n "$missing" ]; then
      echo "test-gpu pack: $binary has unresolved libraries here:" >&2
      echo "$missing" >&2
      exit 1
    fi
    # Under the name ldd gives (the soname the binary asks for), dereferencing symlinks.
    bundled_libraries "$binary" | while read -r path; do cp -L "$path" "$bundle/lib/$(basename "$path")"; done
  done
  for name in libstdc++.so.6 libgcc_s.so.1; do
    path=$(ldd build/deepinfer | awk -v n="$name" '$1 == n { print $3 }')
    [ -n "$path" ] && cp -L "$path" "$bundle/compat/$name"
  done
  strip --strip-unneeded "$bundle"/lib/* "$bundle"/compat/* 2>/dev/null || true

  # What the device needs of its glibc: the newest GLIBC_ symbol version any bundled file uses.
  local glibc
  glibc=$(objdump -T "$bundle"/test_cuda "$bundle"/deepinfer "$bundle"/lib/* 2>/dev/null |
    grep -o 'GLIBC_[0-9][0-9.]*' | sort -u -V | tail -n 1)
  {
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "cuda architectures: $(sed -n 's/^DEEPINFER_CUDA_ARCHITECTURES:[A-Z]*=//p' build/CMakeCache.txt)"
    echo "nvcc: $(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' build/CMakeCache.txt) $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    echo "needs glibc: ${glibc#GLIBC_}"
  } >"$bundle/MANIFEST"

  local bytes
  bytes=$(du -sb "$bundle" | cut -f1)
  echo "== $bundle: $((bytes / 1024 / 1024)) MiB ($bytes bytes)"
  (cd "$bundle" && du -ab . | sort -k2 | sed 's|\./||' | awk '$2 != "." { printf "  %10d  %s\n", $1, $2 }')
  sed 's/^/  /' "$bundle/MANIFEST"
  if [ "$bytes" -gt $((size_limit_mib * 1024 * 1024)) ]; then
    echo "test-gpu pack: the bundle is over ${size_limit_mib} MiB: it would not fit a 64 MiB carry" >&2
    exit 1
  fi
  echo "== next, on the device machine (carry [\"$bundle\"]): scripts/test-gpu.sh run"
}

# gtest's totals from its console log: "[  PASSED  ] N tests.", "[  SKIPPED ] N tests", "[  FAILED  ] N tests".
gtest_count() { sed -n "s/^\[  $1 *\] \([0-9][0-9]*\) tests\{0,1\}[,.].*/\1/p" "$2" | tail -n 1; }

run_mode() {
  if [ ! -f "$bundle/test_cuda" ] || [ ! -f "$bundle/test_engine" ] || [ ! -f "$bundle/deepinfer" ]; then
    echo "test-gpu run: no $bundle/test_cuda here: run 'scripts/test-gpu.sh pack' on the build machine and" >&2
    echo "  carry $bundle to this one" >&2
    exit 1
  fi
  chmod u+x "$bundle/test_cuda" "$bundle/test_engine" "$bundle/deepinfer" 2>/dev/null || true
  local results=${OUT:-$bundle/results}
  mkdir -p "$results"
  export LD_LIBRARY_PATH="$PWD/$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export DEEPINFER_TEST_DATA_DIR="$PWD/tests/data"
  export DEEPINFER_ASSET_DIR="$PWD/assets"
  local failures=() notes=()

  echo "== bundle"
  sed 's/^/  /' "$bundle/MANIFEST" 2>/dev/null || true
  echo "  this machine's glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown)"
  # The device's libstdc++ / libgcc_s, unless they are older than the binaries need.
  local missing
  missing=$(ldd "$bundle/test_cuda" "$bundle/deepinfer" 2>&1 | grep 'not found' || true)
  if grep -Eq "(GLIBCXX|CXXABI|GCC)_[0-9.]*' not found" <<<"$missing"; then
    echo "  this machine's libstdc++ or libgcc_s is older than the binaries need: using $bundle/compat"
    export LD_LIBRARY_PATH="$PWD/$bundle/compat:$LD_LIBRARY_PATH"
    notes+=("used the bundled libstdc++ / libgcc_s ($bundle/compat)")
    missing=$(ldd "$bundle/test_cuda" "$bundle/deepinfer" 2>&1 | grep 'not found' || true)
  fi
  if [ -n "$missing" ]; then
    echo "test-gpu run: the binaries cannot load here:" >&2
    printf '%s\n' "$missing" | sort -u >&2
    exit 1
  fi

  echo "== GPUs"
  local gpus
  if gpus=$(nvidia-smi -L 2>&1); then
    echo "$gpus"
  else
    echo "$gpus"
    failures+=("nvidia-smi -L: no GPU answers")
    gpus=""
  fi

  echo "== test_cuda"
  local args=("--gtest_output=json:$results/test_cuda.json")
  case $("$bundle/test_cuda" --help 2>&1 || true) in *--gtest_brief*) args+=(--gtest_brief=1) ;; esac
  local rc=0
  timeout "${GPU_TEST_TIMEOUT:-480}" "$bundle/test_cuda" "${args[@]}" "$@" 2>&1 | tee "$results/test_cuda.log" || rc=$?
  local passed skipped failed
  passed=$(gtest_count PASSED "$results/test_cuda.log")
  skipped=$(gtest_count SKIPPED "$results/test_cuda.log")
  failed=$(gtest_count FAILED "$results/test_cuda.log")
  local tests_line="test_cuda: ${passed:-?} passed, ${failed:-0} failed, ${skipped:-0} skipped"
  if [ "$rc" -ne 0 ]; then
    case $rc in
      124) tests_line+=" (timed out after ${GPU_TEST_TIMEOUT:-480} s)" ;;
      1) ;;
      *) tests_line+=" (exit $rc: crashed?)" ;;
    esac
    failures+=("test_cuda exited $rc")
  fi
  if [ -z "$passed" ]; then failures+=("test_cuda printed no summary"); fi
  if [ -n "$gpus" ] && [ "${skipped:-0}" -gt 0 ]; then notes+=("${skipped} test(s) skipped with a GPU present: see the log"); fi

  echo "== test_engine on the GPU (DEEPINFER_TEST_DEVICE=cuda)"
  local engine_line
  rc=0
  DEEPINFER_TEST_DEVICE=cuda timeout "${GPU_TEST_TIMEOUT:-480}" "$bundle/test_engine" --gtest_brief=1 2>&1 |
    tee "$results/test_engine.log" | tail -n 20 || rc=$?
  local engine_passed engine_failed
  engine_passed=$(gtest_count PASSED "$results/test_engine.log")
  engine_failed=$(gtest_count FAILED "$results/test_engine.log")
  engine_line="test_engine on cuda: ${engine_passed:-?} passed, ${engine_failed:-0} failed"
  if [ -z "$engine_passed" ]; then failures+=("test_engine printed no summary"); fi
  if [ "$rc" -ne 0 ]; then failures+=("test_engine on cuda exited $rc"); fi

  echo "== CLI smoke test: greedy generate, --device cuda against --device cpu"
  local smoke_line="" cpu_out cuda_out cpu_ids cuda_ids name
  ids_of() { sed -n 's/.*"ids":\(\[[^]]*\]\).*/\1/p'; }
  for name in v4/tiny_fp8 v41/tiny_fp8; do
    local generate=("$bundle/deepinfer" generate --model "tests/data/golden/$name" --prompt-ids 1,2,3 --max-tokens 8
      --ignore-eos --json)
    case $name in v41/*) generate+=(--tokenizer assets/tokenizer/deepseek_v41_tokenizer.json) ;; esac
    cpu_out=$("${generate[@]}" --device cpu 2>"$results/generate_cpu.err") || {
      cat "$results/generate_cpu.err"
      failures+=("generate $name --device cpu failed")
    }
    cuda_out=$("${generate[@]}" --device cuda 2>"$results/generate_cuda.err") || {
      cat "$results/generate_cuda.err"
      failures+=("generate $name --device cuda failed")
    }
    grep -h '^deepinfer generate: ' "$results/generate_cpu.err" "$results/generate_cuda.err" 2>/dev/null | sed 's/^/  /' || true
    cpu_ids=$(printf '%s' "$cpu_out" | ids_of)
    cuda_ids=$(printf '%s' "$cuda_out" | ids_of)
    echo "  $name cpu:  ${cpu_ids:-none}"
    echo "  $name cuda: ${cuda_ids:-none}"
    if [ -n "$cpu_ids" ] && [ "$cpu_ids" = "$cuda_ids" ]; then
      smoke_line+="generate $name: cuda ids == cpu ids ($(printf '%s' "$cpu_ids" | awk -F, '{ print NF }') tokens); "
    else
      smoke_line+="generate $name: cuda ids DIFFER from cpu ids; "
      failures+=("greedy generate $name: cuda ids != cpu ids")
    fi
  done

  # The golden fixtures are too narrow for the tensor-core expert kernels (expert_mma.cu needs
  # 128-column FP4 experts): a small random V4.1-Flash-shaped checkpoint (hidden 256, 16 FP4
  # experts of width 128) runs them, judged the same way. Written here (python3 with numpy).
  echo "== the small synthetic V4.1-Flash (FP4 experts on the tensor cores), --device cuda against --device cpu"
  local small=${DEEPINFER_SMALL_SYNTHETIC:-/tmp/deepinfer-v41-small}
  if [ -f "$small/config.json" ] || python3 tools/make_synthetic_v41_flash.py --out "$small" --layers 2 --small \
    --force >"$results/synthetic.log" 2>&1; then
    local generate=("$bundle/deepinfer" generate --model "$small" --prompt-ids 1,2,3,4,5,6,7,8,9 --max-tokens 12
      --ignore-eos --json)
    cpu_out=$("${generate[@]}" --device cpu 2>"$results/generate_cpu.err") || cat "$results/generate_cpu.err"
    cuda_out=$("${generate[@]}" --device cuda 2>"$results/generate_cuda.err") || cat "$results/generate_cuda.err"
    cpu_ids=$(printf '%s' "$cpu_out" | ids_of)
    cuda_ids=$(printf '%s' "$cuda_out" | ids_of)
    echo "  small synthetic cpu:  ${cpu_ids:-none}"
    echo "  small synthetic cuda: ${cuda_ids:-none}"
    if [ -n "$cpu_ids" ] && [ "$cpu_ids" = "$cuda_ids" ]; then
      smoke_line+="generate small synthetic V4.1-Flash: cuda ids == cpu ids; "
    else
      smoke_line+="generate small synthetic V4.1-Flash: cuda ids DIFFER from cpu ids; "
      failures+=("greedy generate on the small synthetic V4.1-Flash: cuda ids != cpu ids")
    fi
  else
    sed 's/^/  /' "$results/synthetic.log"
    failures+=("tools/make_synthetic_v41_flash.py --small failed")
  fi

  # Perplexity of the same ids on both devices: reported, not judged (the backends may round
  # differently; test_cuda holds the tolerances).
  echo "== CLI perplexity, --device cuda against --device cpu (reported only)"
  local ids_file="$results/perplexity_ids.json" ppl_line=""
  printf '[0,671,4787,13769,46012,54994,1060,270,41638,6397,14,1539,436,12122,1559,1055,270,12426,9364,304,7053,16]\n' >"$ids_file"
  local cpu_ppl cuda_ppl
  local real_vocab=tests/data/golden/v4/real_vocab
  if cpu_ppl=$("$bundle/deepinfer" perplexity --model "$real_vocab" --ids-file "$ids_file" --json --device cpu 2>/dev/null) &&
    cuda_ppl=$("$bundle/deepinfer" perplexity --model "$real_vocab" --ids-file "$ids_file" --json --device cuda 2>"$results/perplexity_cuda.err"); then
    ppl_line=$(python3 - "$cpu_ppl" "$cuda_ppl" <<'PY' 2>/dev/null || echo "perplexity: cpu and cuda ran (python3 could not compare)"
import json, sys
cpu, cuda = json.loads(sys.argv[1]), json.loads(sys.argv[2])
worst = max(abs(a - b) for a, b in zip(cpu["nll"], cuda["nll"]))
print(f"perplexity: mean NLL cpu {cpu['mean_nll']:.6f}, cuda {cuda['mean_nll']:.6f}; max |per-token NLL diff| {worst:.2e}")
PY
    )
  else
    cat "$results/perplexity_cuda.err" 2>/dev/null || true
    failures+=("perplexity --device cpu/cuda failed")
    ppl_line="perplexity: failed"
  fi
  echo "  $ppl_line"

  echo
  echo "================ GPU test summary ================"
  sed -n 's/^commit: /bundle: /p' "$bundle/MANIFEST" 2>/dev/null || true
  if [ -n "$gpus" ]; then printf '%s\n' "$gpus" | sed 's/ (UUID.*//'; else echo "no GPU answered"; fi
  echo "$tests_line"
  if [ "${failed:-0}" -gt 0 ]; then grep '^\[  FAILED  \] [A-Za-z]' "$results/test_cuda.log" | sort -u | head -n 20 | sed 's/^/  /'; fi
  echo "$engine_line"
  echo "$smoke_line"
  echo "$ppl_line"
  for note in "${notes[@]}"; do echo "note: $note"; done
  echo "results: $results"
  if ((${#failures[@]})); then
    for failure in "${failures[@]}"; do echo "FAILED: $failure"; done
    echo "=================== FAIL ========================="
    exit 1
  fi
  echo "=================== PASS ========================="
}

case ${1:-} in
  pack) shift; [ $# -eq 0 ] || usage; pack ;;
  run) shift; run_mode "$@" ;;
  *) usage ;;
esac
