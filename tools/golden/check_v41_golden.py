#!/usr/bin/env python3
"""Sanity-check the DeepSeek-V4.1 golden fixtures with the standard library only (no torch/numpy).

Per fixture: every safetensors file parses; greedy ids are the argmax of their logits and the
first greedy step matches the full-forward row of the last prompt token; chunked-prefill logits
match the full forward; indexer / candidate-block picks respect visibility, top-k and the
candidate pool; Engram hash ids fall in their (prime, offset) buckets; in the FP8 fixture every
32x32 tile, every Engram (row, 32-column) group and every FP4 group uses the smallest
power-of-two scale that fits it.

Usage: python3 check_v41_golden.py tests/data/golden/v41
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_v4_golden import E2M1, SafeTensors, e4m3_value, rows  # noqa: E402

TOL = 1e-4


def max_abs(a, b):
    return max(abs(x - y) for x, y in zip(a, b))


def check_golden(folder, problems):
    cfg = json.load(open(os.path.join(folder, "config.json")))
    tc = cfg["text_config"]
    g = SafeTensors(os.path.join(folder, "reference", "golden.safetensors"))
    ids, prompt, greedy = g.values("input_ids"), g.values("greedy_prompt_ids"), g.values("greedy_ids")
    T, V, P = len(ids), tc["vocab_size"], len(prompt)
    assert prompt == ids[:P], "greedy prompt is not a prefix of input_ids"
    logits = rows(g.values("logits"), V)
    glog = rows(g.values("greedy_logits"), V)
    for step, (row, tok) in enumerate(zip(glog, greedy)):
        if max(range(V), key=row.__getitem__) != tok:
            problems.append(f"{folder}: greedy step {step} id {tok} is not the argmax")
    d = max_abs(glog[0], logits[P - 1])
    if d > TOL:
        problems.append(f"{folder}: first greedy step differs from logits row {P - 1} by {d}")
    for name in ("chunked5_logits", "chunked13_logits"):
        d = max(max_abs(a, b) for a, b in zip(rows(g.values(name), V), logits))
        if d > TOL:
            problems.append(f"{folder}: {name} differs from the full forward by {d}")

    ratios, topk = tc["compress_ratios"], tc["index_topk"]
    sources = tc["index_source_layer_ids"]
    n_src = len(sources)
    sel = rows(rows(g.values("indexer_topk"), topk), n_src)
    bs, kb = tc["candidate_block_size"], tc["candidate_topk_blocks"]
    cand = rows(g.values("candidate_blocks"), kb)
    cand_layer = tc["candidate_source_layer_id"]
    for t in range(T):
        for si, layer in enumerate(sources):
            picks = [x for x in sel[t][si] if x >= 0]
            visible = (t + 1) // ratios[layer]
            if picks != sorted(picks) or any(x >= visible for x in picks):
                problems.append(f"{folder}: position {t} layer {layer} picks {picks} (visible {visible})")
            pool = visible
            if 0 <= cand_layer < layer:
                blocks = [b for b in cand[t] if b >= 0]
                pool = sum(min(bs, visible - b * bs) for b in blocks)
                if any(x // bs not in blocks for x in picks):
                    problems.append(f"{folder}: position {t} layer {layer} picks outside the candidate pool")
            if len(picks) != min(topk, pool):
                problems.append(f"{folder}: position {t} layer {layer} has {len(picks)} picks, want {min(topk, pool)}")
        visible = (t + 1) // ratios[cand_layer]
        if visible and (visible - 1) // bs not in cand[t]:
            problems.append(f"{folder}: position {t}: newest block not pinned in the candidate pool")

    H, N = tc["engram_n_heads"], tc["engram_max_ngram_size"]
    L = len(tc["engram_layer_ids"])
    primes = rows(rows(g.values("engram_primes"), H), N - 1)
    offsets = rows(g.values("engram_offsets"), (N - 1) * H)
    hashes = rows(rows(g.values("engram_hash_ids"), (N - 1) * H), L)
    for li in range(L):
        flat = [p for per in primes[li] for p in per]
        if sum(flat) != tc["engram_num_embeddings"][li]:
            problems.append(f"{folder}: engram layer {li} primes sum {sum(flat)} != num_embeddings")
        for t in range(T):
            for c, h in enumerate(hashes[t][li]):
                if not offsets[li][c] <= h < offsets[li][c] + flat[c]:
                    problems.append(f"{folder}: engram hash {h} at ({t},{li},{c}) outside its bucket")
    if g.values("engram_compressed_vocab_size")[0] != tc["engram_compressed_vocab_size"]:
        problems.append(f"{folder}: compressed vocab size differs from config.json")
    print(f"  {os.path.basename(folder)}: T={T} vocab={V} greedy {len(greedy)} steps, picks and hashes consistent")


def tight(amax, qmax):
    # after scaling, amax lies in (qmax/2, qmax] unless rounding pulled it down a step
    return amax <= qmax and amax > qmax / 2 * 0.93


def check_quantized(folder, problems):
    cfg = json.load(open(os.path.join(folder, "config.json")))
    br, bc = cfg["quantization_config"]["weight_block_size"]
    index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
    files = {f: SafeTensors(os.path.join(folder, f)) for f in sorted(set(index["weight_map"].values()))}
    counts = {"fp8": 0, "engram": 0, "fp4": 0}
    for name, fname in index["weight_map"].items():
        st = files[fname]
        dt = st.tensors[name]["dtype"]
        scale_name = name[: -len(".weight")] + ".scale"
        if dt == "F8_E4M3" and ".engram.embed." in name:
            n_rows, n_cols = st.shape(name)
            vals = rows([e4m3_value(b) for b in st.raw(name)], n_cols)
            sshape = files[index["weight_map"][scale_name]].shape(scale_name)
            if sshape != [n_rows, n_cols // 32]:
                problems.append(f"{name}: scale shape {sshape}")
            for r in vals:
                for j in range(0, n_cols, 32):
                    if not tight(max(abs(v) for v in r[j : j + 32]), 448.0):
                        problems.append(f"{name}: row group not tight")
            counts["engram"] += 1
        elif dt == "F8_E4M3":
            out_f, in_f = st.shape(name)
            vals = rows([e4m3_value(b) for b in st.raw(name)], in_f)
            sshape = files[index["weight_map"][scale_name]].shape(scale_name)
            if sshape != [-(-out_f // br), -(-in_f // bc)]:
                problems.append(f"{name}: scale shape {sshape} for block {br}x{bc}")
            for bi in range(-(-out_f // br)):
                for bj in range(-(-in_f // bc)):
                    amax = max(abs(v) for r in vals[bi * br : (bi + 1) * br] for v in r[bj * bc : (bj + 1) * bc])
                    if not tight(amax, 448.0):
                        problems.append(f"{name} tile ({bi},{bj}) amax {amax} not tight")
            counts["fp8"] += 1
        elif dt == "I8" and ".experts." in name:
            _, half = st.shape(name)
            codes = []
            for b in st.raw(name):
                codes += [b & 15, b >> 4]
            for r in rows([(-1 if c & 8 else 1) * E2M1[c & 7] for c in codes], 2 * half):
                for j in range(0, 2 * half, 32):
                    if max(abs(v) for v in r[j : j + 32]) < 3.0:
                        problems.append(f"{name}: fp4 group not tight")
            counts["fp4"] += 1
    print(f"  {os.path.basename(folder)}: tight scales on {counts['fp8']} FP8 linears ({br}x{bc}), "
          f"{counts['engram']} FP8 engram tables (per row), {counts['fp4']} FP4 experts")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/data/golden/v41"
    problems = []
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if not os.path.isdir(folder):
            continue
        for f in sorted(os.listdir(folder)):
            if f.endswith(".safetensors"):
                SafeTensors(os.path.join(folder, f))
        check_golden(folder, problems)
        if os.path.exists(os.path.join(folder, "model.safetensors.index.json")):
            check_quantized(folder, problems)
    for p in problems[:50]:
        print("PROBLEM:", p)
    print("ok" if not problems else f"{len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
