#!/usr/bin/env bash
# Installs what deepinfer's build, tests and benchmarks need on Debian 12. Idempotent: a second run
# installs nothing and takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev lld        # libFuzzer and sanitizer runtimes; lld links the sanitizer build
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev nlohmann-json3-dev
  libutf8proc-dev                     # Unicode normalisation (Engram token map)
  libboost1.81-dev                    # the HTTP server (src/server): Boost.Asio + Boost.Beast, header-only
  libcpp-httplib-dev                  # the HTTP client of the tests and `deepinfer bench`
)
# The CUDA backend needs nothing from Debian: it builds with the CUDA toolkit's nvcc, preinstalled
# under /usr/local/cuda here and in CI (scripts/build.sh puts /usr/local/cuda/bin on PATH when
# nvcc is not on it, for CMake to find). Where nvcc is absent the build simply has no CUDA backend
# (DEEPINFER_CUDA defaults to off) and everything runs on the CPU.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm peers (the Hugging Face tokenizers library for parity data and benchmarks).
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules ]; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  touch node_modules
fi
