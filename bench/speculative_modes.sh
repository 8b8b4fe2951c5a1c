#!/usr/bin/env bash
# Speculative decoding's modes side by side under `deepinfer bench` (docs/BENCHMARKS.md, issue 15):
# one server per mode, one bench run per concurrency against it, then one table of output tokens/s,
# acceptance length, draft tokens verified and kept, rounds and per-position acceptance.
#
#   bench/speculative_modes.sh DEEPINFER DATASET OUTDIR MODE...
#     MODE = NAME:CONCURRENCIES:SERVE-ARGS, e.g. 'static:1,8,32:--speculative static'
#   env: PORT (8130), DEVICE (cuda), SERVE_EXTRA (more serve arguments for every mode, e.g.
#   '--threads 2' on the CPU)
#
# Requests per run: 48 at concurrency 1, else max(64, 4 C). Bench sends temperature 0 (greedy)
# and lets requests stop at EOS. Each run's JSON stays in OUTDIR (b_NAME_C.json), each server's
# log as serve_NAME.log, the table as summary.txt.
set -uo pipefail
if [ $# -lt 4 ]; then sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; fi
deepinfer=$1 dataset=$2 out=$3
shift 3
port=${PORT:-8130}
device=${DEVICE:-cuda}
mkdir -p "$out"
server=
start_server() {  # name, serve args...
  local name=$1 log="$out/serve_$1.log"
  shift
  # shellcheck disable=SC2086
  "$deepinfer" serve --device "$device" --port "$port" ${SERVE_EXTRA:-} "$@" >"$log" 2>&1 &
  server=$!
  for _ in $(seq 300); do
    grep -q "listening on" "$log" && return 0
    kill -0 "$server" 2>/dev/null || break
    sleep 1
  done
  echo "speculative_modes: the $name server did not start:"; tail -n 5 "$log"
  kill "$server" 2>/dev/null
  return 1
}
for spec in "$@"; do
  IFS=: read -r name concurrencies serve_args <<<"$spec"
  # shellcheck disable=SC2086
  start_server "$name" $serve_args || continue
  for c in ${concurrencies//,/ }; do
    n=$((c == 1 ? 48 : (4 * c > 64 ? 4 * c : 64)))
    "$deepinfer" bench --port "$port" --endpoint chat --dataset "$dataset" --no-ignore-eos --num-prompts "$n" \
      --max-concurrency "$c" --json >"$out/b_${name}_$c.json" 2>"$out/b_${name}_$c.err" ||
      { echo "speculative_modes: bench $name C=$c failed:"; tail -n 3 "$out/b_${name}_$c.err"; }
  done
  kill -INT "$server"
  wait "$server" 2>/dev/null
done
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import glob, json, os, sys
rows = {}
for path in glob.glob(os.path.join(sys.argv[1], 'b_*.json')):
    mode, c = os.path.basename(path)[2:-5].rsplit('_', 1)
    try:
        run = json.load(open(path))
    except ValueError:
        continue
    rows[(int(c), mode)] = run
print('%-10s %4s %9s %7s %9s %8s %7s %8s  %s' % ('mode', 'C', 'tok/s', 'length', 'verified', 'kept', 'rounds',
                                               'ver/step', 'acceptance per position, %'))
for (c, mode), run in sorted(rows.items()):
    s = run.get('speculative_decoding') or {}
    line = '%-10s %4d %9.1f' % (mode, c, run['output_throughput'])
    if s.get('drafts'):
        per = ' '.join('%.1f' % (100 * x) for x in s['acceptance_rate_per_position'] if x is not None)
        line += ' %7.3f %9d %8d %7d %8.2f  %s' % (s['acceptance_length'], s['draft_tokens'], s['accepted_tokens'],
                                               s['drafts'], s['draft_tokens_per_step'] or 0, per)
    print(line)
PY
