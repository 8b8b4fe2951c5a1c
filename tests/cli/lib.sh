# Helpers for the CLI tests: each test script gets the deepinfer binary as $1.
set -uo pipefail
DEEPINFER=${1:?usage: $0 path/to/deepinfer}
failures=0
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/listening_port.sh"

# expect_eq NAME ACTUAL EXPECTED
expect_eq() {
  if [ "$2" != "$3" ]; then
    printf 'FAIL %s\n  expected: %s\n  actual:   %s\n' "$1" "$3" "$2"
    failures=$((failures + 1))
  else
    printf 'ok   %s\n' "$1"
  fi
}

# expect_exit NAME EXPECTED_CODE CMD... (stdin from /dev/null unless redirected by the caller)
expect_exit() {
  local name=$1 want=$2
  shift 2
  "$@" >/dev/null 2>"${TMPDIR:-/tmp}/deepinfer_cli_stderr.$$"
  local got=$?
  if [ "$got" != "$want" ]; then
    printf 'FAIL %s: exit %s, expected %s\n' "$name" "$got" "$want"
    sed 's/^/  stderr: /' "${TMPDIR:-/tmp}/deepinfer_cli_stderr.$$"
    failures=$((failures + 1))
  else
    printf 'ok   %s\n' "$name"
  fi
  rm -f "${TMPDIR:-/tmp}/deepinfer_cli_stderr.$$"
}

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
  fi
  echo "all passed"
}
