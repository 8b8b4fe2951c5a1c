#!/usr/bin/python3
"""Writes tests/data/engram/hash_multipliers.json: Engram hash multipliers as transformers'
deepseek_v41 compute_hash_multipliers draws them, one row per (layer id, max n-gram size,
compressed vocab size): numpy.random.default_rng(10007 * layer_id).integers(0, bound, size=(n,),
dtype=int64) * 2 + 1 with bound = max(1, (INT64_MAX // vocab) // 2).

The cases cover the released config (layers 1 and 14, n = 4, vocab 99092), the tiny test
config, layer 0 (seed 0), seeds whose entropy needs two 32-bit words, and vocab sizes whose
bound falls at or below 2**32 (numpy's 32-bit bounded path) or to 1.

Needs numpy: Debian's python3-numpy (/usr/bin/python3).
Usage: /usr/bin/python3 tools/engram/make_hash_multipliers.py [out.json]
"""
import json
import sys

import numpy as np

CASES = [
    (1, 4, 99092), (14, 4, 99092),   # DeepSeek-V4.1-Flash
    (1, 3, 400),                      # tests/data/configs/tiny_v41.json
    (0, 4, 99092), (2, 2, 7), (60, 16, 129280), (500000, 4, 99092),  # 10007 * 500000 > 2**32
    (3, 5, 2**31), (5, 4, 2**31 + 12345), (7, 3, 2**32 - 1),  # bound <= 2**32 - 1
    (9, 4, 2**62),                    # bound 1: every multiplier is 1
]


def multipliers(layer_id, max_ngram_size, vocab):
    bound = max(1, (np.iinfo(np.int64).max // vocab) // 2)
    rng = np.random.default_rng(10007 * layer_id)
    values = rng.integers(low=0, high=bound, size=(max_ngram_size,), dtype=np.int64)
    return [int(v) for v in values * 2 + 1]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/engram/hash_multipliers.json"
    rows = [
        {"layer_id": layer, "max_ngram_size": n, "compressed_vocab_size": vocab,
         "multipliers": multipliers(layer, n, vocab)}
        for layer, n, vocab in CASES
    ]
    doc = {"source": f"tools/engram/make_hash_multipliers.py, numpy {np.__version__}", "cases": rows}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
