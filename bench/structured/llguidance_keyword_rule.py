#!/usr/bin/env python3
"""How many dev-split schemas llguidance refuses by its keyword rule alone.

llguidance (parser/src/json/schema_compiler.rs, check_unimplemented_keys; schema.rs, IMPLEMENTED
and META_AND_ANNOTATIONS) refuses, unless lenient, any subschema it compiles that has a keyword
the draft knows and it neither implements nor reads as an annotation, and (docs/json_schema.md)
any `format` outside its list. That rule alone refuses the schemas this script counts, per split,
so (schemas - counted) bounds from above what llguidance compiles on the same schemas: it refuses
more for other reasons (oneOf it cannot prove disjoint, allOf intersections, sizes). The walk
follows what a compiler visits: the root, subschemas under applicators and local $refs; unused
$defs are not visited.

usage: llguidance_keyword_rule.py [../shared/structured/jsonschemabench_dev.jsonl.xz]
prints one line per split: refused by the rule, schemas, the bound, and the keywords met.
"""
import collections
import json
import lzma
import sys

IMPLEMENTED = {
    "anyOf", "oneOf", "allOf", "$ref", "const", "enum", "type", "items", "additionalItems", "prefixItems",
    "minItems", "maxItems", "properties", "additionalProperties", "patternProperties", "required",
    "minProperties", "maxProperties", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
}
ANNOTATIONS = {
    "$anchor", "$defs", "definitions", "$schema", "$id", "id", "$comment", "title", "description", "default",
    "readOnly", "writeOnly", "examples", "contentMediaType", "contentEncoding",
}
# The keywords of drafts 4 to 2020-12 (core, applicator, validation, meta-data, content,
# unevaluated, format vocabularies); a key outside these is unknown to every draft and ignored.
KNOWN = IMPLEMENTED | ANNOTATIONS | {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "uniqueItems", "contains",
    "minContains", "maxContains", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
    "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", "$vocabulary", "deprecated", "contentSchema",
}
FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri"}
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_ONE = ("additionalProperties", "additionalItems", "items", "not", "if", "then", "else", "contains",
              "propertyNames", "unevaluatedProperties", "unevaluatedItems")


def resolve(root, ref):
    if not ref.startswith("#/"):
        return None
    node = root
    for token in ref[2:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def refused_keywords(root):
    """The keywords (and formats) the rule refuses in what a compiler visits from the root."""
    found, seen, stack = set(), set(), [root]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        for key, value in node.items():
            if key in KNOWN and key not in IMPLEMENTED and key not in ANNOTATIONS:
                found.add(key)
            if key == "format" and isinstance(value, str) and value not in FORMATS:
                found.add("format:" + value)
            if key == "$ref" and isinstance(value, str):
                stack.append(resolve(root, value))
            elif key in SCHEMA_MAPS and key not in ("$defs", "definitions") and isinstance(value, dict):
                stack.extend(value.values())
            elif key in SCHEMA_LISTS and isinstance(value, list):
                stack.extend(value)
            elif key in SCHEMA_ONE:
                stack.extend(value if isinstance(value, list) else [value])
    return found


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "../shared/structured/jsonschemabench_dev.jsonl.xz"
    total, refused, keywords = collections.Counter(), collections.Counter(), collections.defaultdict(collections.Counter)
    with lzma.open(path, "rt") as lines:
        for line in lines:
            record = json.loads(line)
            split = record["split"]
            total[split] += 1
            found = refused_keywords(record["schema"])
            if found:
                refused[split] += 1
                keywords[split].update(found)
    for split in sorted(total):
        bound = total[split] - refused[split]
        top = ", ".join(f"{k} {n}" for k, n in keywords[split].most_common(5))
        print(f"{split}: refused {refused[split]}/{total[split]}, compiles at most {bound}/{total[split]}"
              f" ({bound / total[split]:.2f}){'; ' + top if top else ''}")


if __name__ == "__main__":
    main()
