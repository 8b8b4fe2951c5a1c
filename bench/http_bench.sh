#!/usr/bin/env bash
# Streaming throughput and time to first byte of `deepinfer serve` at 256 and 1,024 concurrent
# clients (docs/BENCHMARKS.md, "HTTP server"). Usage:
#   bench/http_bench.sh DEEPINFER_BINARY [RUNS=3] [SECONDS=15]
# Serves the tiny random-weight model (tests/data/golden/v4/real_vocab) on the CPU, then per
# client count runs bench/http_stream_bench.mjs (raw sockets: TTFB, first SSE event, events/s)
# and wrk with bench/stream_chat.lua (requests/s, whole-stream latency), RUNS times each.
# Prints one line per run; the medians go to docs/BENCHMARKS.md by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/listening_port.sh
binary=${1:?usage: bench/http_bench.sh DEEPINFER_BINARY [RUNS] [SECONDS]}
runs=${2:-3}
seconds=${3:-15}
log=$(mktemp)
ulimit -n "$(ulimit -Hn)"
"$binary" serve --model tests/data/golden/v4/real_vocab --served-model-name tiny --port 0 --cache-memory 256M \
  >"$log" 2>/dev/null &
pid=$!
trap 'kill "$pid" 2>/dev/null; rm -f "$log"' EXIT
port=$(listening_port "$log")
[ -n "$port" ] || { echo "the server did not start" >&2; exit 1; }
# Warm-up: the first requests fill the allocator and the prefix cache.
node bench/http_stream_bench.mjs "$port" 64 3 >/dev/null
for clients in 256 1024; do
  for run in $(seq 1 "$runs"); do
    echo "node clients=$clients run=$run $(node bench/http_stream_bench.mjs "$port" "$clients" "$seconds")"
    wrk -t2 -c"$clients" -d"${seconds}s" --timeout 60s --latency -s bench/stream_chat.lua \
      "http://127.0.0.1:$port/v1/chat/completions" |
      awk -v c="$clients" -v r="$run" '/Requests\/sec/ {rps=$2} / 99%/ {p99=$2} /Non-2xx|Socket errors/ {err=err $0 ";"}
        END {printf "wrk clients=%s run=%s requests_per_s=%s latency_p99=%s errors=%s\n", c, r, rps, p99, err}'
  done
done
