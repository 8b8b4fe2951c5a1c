#!/usr/bin/env bash
# `deepinfer grammar` end to end: a compile's summary line, a refusal's exit code, the keywords a
# lenient schema does not enforce, and --check walking instances with the bundled tokenizer.
source "$(dirname "$0")/lib.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Node (which setup.sh installs) reads the JSON: a field of the summary line (its other fields
# are timings), and the lines of --check.
node_stdin() { node -e "let s = ''; process.stdin.on('data', d => s += d).on('end', () => { $1 })" "${@:2}"; }
field() { node_stdin 'console.log(JSON.stringify(JSON.parse(s.split("\n")[0])[process.argv[1]]))' "$1"; }

cat >"$work/tags.json" <<'SCHEMA'
{"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": true}},
 "required": ["tags"], "additionalProperties": false}
SCHEMA
expect_exit "a keyword that cannot be enforced is refused" 1 "$DEEPINFER" grammar --json-schema "$work/tags.json"
expect_eq "the refusal names the keyword's pointer" \
  "$("$DEEPINFER" grammar --json-schema "$work/tags.json" 2>&1 | grep -o '/properties/tags/uniqueItems')" \
  "/properties/tags/uniqueItems"
expect_eq "--lenient lists what it does not enforce" \
  "$("$DEEPINFER" grammar --json-schema "$work/tags.json" --lenient | field not_enforced)" \
  '[{"message":"uniqueItems is not enforced (lenient)","pointer":"/properties/tags/uniqueItems"}]'
node_stdin 'const schema = JSON.parse(s); schema["x-guidance"] = {lenient: true}; console.log(JSON.stringify(schema))' \
  <"$work/tags.json" >"$work/lenient.json"
expect_eq "so does the schema's own x-guidance" \
  "$("$DEEPINFER" grammar --json-schema "$work/lenient.json" | field not_enforced)" \
  '[{"message":"uniqueItems is not enforced (lenient)","pointer":"/properties/tags/uniqueItems"}]'
expect_eq "a schema enforced whole lists nothing" \
  "$(echo '{"type": "integer"}' >"$work/int.json" && "$DEEPINFER" grammar --json-schema "$work/int.json" | grep -c not_enforced)" "0"

printf '%s\n' '{"tags": ["a", "a"]}' '{"tags": ["c"]}' >"$work/instances.jsonl"
check=$("$DEEPINFER" grammar --json-schema "$work/lenient.json" --check "$work/instances.jsonl" | tail -n 2)
expect_eq "--check accepts an instance and rejects another at its byte" \
  "$(node_stdin 'console.log(s.trim().split("\n").map(l => JSON.parse(l)).map(r => `${r.accepted}@${r.rejected_at_byte}`).join(" "))' <<<"$check")" \
  "true@null false@10"
expect_exit "--check of a regex" 0 "$DEEPINFER" grammar --regex '[0-9]+' --check <(echo '"123"')

expect_exit "an unknown x-guidance option is refused" 1 "$DEEPINFER" grammar --json-schema <(echo '{"x-guidance": {"x": 1}}')
expect_exit "an invalid regex is refused" 1 "$DEEPINFER" grammar --regex '(a'
expect_exit "two sources" 2 "$DEEPINFER" grammar --regex a --ebnf /dev/null
expect_exit "--pretty without a schema" 2 "$DEEPINFER" grammar --regex a --pretty
expect_exit "--help" 0 "$DEEPINFER" grammar --help
finish
