#!/usr/bin/env python3
"""Pack rendered examples into the compact arrays train.py reads (stdlib only).

Input: JSONL from `deepinfer render --train` ({"ids", "answer_start", ...}: loss on ids from
answer_start on) or from `deepinfer tokenize --jsonl --add-bos` (a bare id array: loss on every
token after BOS). Output: NAME_ids.u32.gz (uint32 LE), NAME_mask.u8.gz (1 = a token the model is
trained to predict), NAME_offsets.u64 (each example's start, then the total).
Usage: pack.py OUT_DIR NAME INPUT.jsonl
"""

import array
import gzip
import json
import os
import sys


def main():
    out_dir, name, path = sys.argv[1:4]
    ids, mask, offsets = array.array("I"), array.array("B"), array.array("Q", [0])
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if isinstance(row, list):
                seq, start = row, 1
            else:
                seq, start = row["ids"], row["answer_start"]
            ids.extend(seq)
            mask.extend([0] * start + [1] * (len(seq) - start))
            offsets.append(len(ids))
    if sys.byteorder != "little":
        ids.byteswap()
        offsets.byteswap()
    os.makedirs(out_dir, exist_ok=True)
    with gzip.open(os.path.join(out_dir, f"{name}_ids.u32.gz"), "wb", compresslevel=6) as g:
        g.write(ids.tobytes())
    with gzip.open(os.path.join(out_dir, f"{name}_mask.u8.gz"), "wb", compresslevel=6) as g:
        g.write(mask.tobytes())
    with open(os.path.join(out_dir, f"{name}_offsets.u64"), "wb") as g:
        g.write(offsets.tobytes())
    print(json.dumps({"split": name, "examples": len(offsets) - 1, "tokens": len(ids), "target_tokens": sum(mask)}))


if __name__ == "__main__":
    main()
