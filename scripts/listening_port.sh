# Sourced: listening_port LOG prints the port of a `deepinfer serve --port 0` whose stdout goes to
# LOG, once its "listening on http://127.0.0.1:PORT" line is there (polled for up to 20 s), or
# nothing if it never comes. Shared by the CLI tests and bench/http_bench.sh.
listening_port() {
  local port=""
  for _ in $(seq 1 400); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$1" 2>/dev/null)
    [ -n "$port" ] && break
    sleep 0.05
  done
  printf '%s' "$port"
}
