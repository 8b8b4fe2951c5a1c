#!/usr/bin/env python3
"""Sanity-check the DeepSeek-V4 golden fixtures with the standard library only (no torch/numpy).

Checks per fixture folder: every safetensors file parses (header, contiguous offsets, sizes),
the golden's internal consistency (greedy ids are the argmax of their logits, the first greedy
step equals the causal row of the last prompt token), and for the FP8/FP4 fixture that every
block scale is the smallest power of two that fits the block (so the stored values use the grid).

Usage: python3 check_v4_golden.py tests/data/golden/v4
"""

import array
import json
import math
import os
import struct
import sys

SIZE = {"F32": 4, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1, "F8_E4M3": 1, "F8_E8M0": 1}


class SafeTensors:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            blob = f.read()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8 : 8 + n])
        self.meta = header.pop("__metadata__", {})
        self.data = blob[8 + n :]
        self.tensors = header
        spans = sorted(v["data_offsets"] for v in header.values())
        pos = 0
        for begin, end in spans:
            assert begin == pos, f"{path}: hole or overlap at byte {begin}"
            pos = end
        assert pos == len(self.data), f"{path}: {len(self.data) - pos} trailing bytes"
        for name, v in header.items():
            want = SIZE[v["dtype"]] * math.prod(v["shape"])
            got = v["data_offsets"][1] - v["data_offsets"][0]
            assert want == got, f"{path}: {name} has {got} bytes, shape needs {want}"

    def raw(self, name):
        b, e = self.tensors[name]["data_offsets"]
        return self.data[b:e]

    def values(self, name):
        dt = self.tensors[name]["dtype"]
        raw = self.raw(name)
        if dt == "F32":
            a = array.array("f")
            a.frombytes(raw)
        elif dt == "I64":
            a = array.array("q")
            a.frombytes(raw)
        elif dt == "BF16":
            a = array.array("f")
            a.frombytes(b"".join(b"\0\0" + raw[i : i + 2] for i in range(0, len(raw), 2)))
        else:
            a = array.array("B" if dt != "I8" else "b")
            a.frombytes(raw)
        if sys.byteorder != "little":
            a.byteswap()
        return list(a)

    def shape(self, name):
        return self.tensors[name]["shape"]


def rows(flat, width):
    return [flat[i : i + width] for i in range(0, len(flat), width)]


def e4m3_value(byte):
    sign = -1.0 if byte & 0x80 else 1.0
    exp, mant = (byte >> 3) & 15, byte & 7
    assert not (exp == 15 and mant == 7), "e4m3 NaN"
    if exp == 0:
        return sign * mant * 2.0**-9
    return sign * (1 + mant / 8) * 2.0 ** (exp - 7)


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def check_golden(folder, problems):
    g = SafeTensors(os.path.join(folder, "reference", "golden.safetensors"))
    ids = g.values("input_ids")
    prompt = g.values("greedy_prompt_ids")
    greedy = g.values("greedy_ids")
    assert prompt == ids[: len(prompt)], "greedy prompt is not a prefix of input_ids"
    if "causal_logits" in g.tensors:
        vocab = g.shape("causal_logits")[1]
        causal = rows(g.values("causal_logits"), vocab)
        glog = rows(g.values("greedy_logits"), vocab)
        for step, (row, tok) in enumerate(zip(glog, greedy)):
            if max(range(vocab), key=row.__getitem__) != tok:
                problems.append(f"{folder}: greedy step {step} id {tok} is not the argmax")
        if glog[0] != causal[len(prompt) - 1]:
            problems.append(f"{folder}: first greedy step differs from causal row {len(prompt) - 1}")
        full = rows(g.values("full_logits"), vocab)
        leak = max(abs(a - b) for fr, cr in zip(full, causal) for a, b in zip(fr, cr))
        print(f"  {os.path.basename(folder)}: T={len(ids)} vocab={vocab} max|full-causal|={leak:.2e}")
    else:
        top = rows(g.values("greedy_top_ids"), g.shape("greedy_top_ids")[1])
        for step, tok in enumerate(greedy):
            if top[step][0] != tok:
                problems.append(f"{folder}: greedy step {step} id {tok} is not the top-1")
        print(f"  {os.path.basename(folder)}: T={len(ids)} (top-k logits only) greedy={greedy}")


def check_fp8_scales(folder, problems):
    """Each FP8 tile / FP4 group must use the smallest power-of-two scale that fits it."""
    index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))
    files = {f: SafeTensors(os.path.join(folder, f)) for f in sorted(set(index["weight_map"].values()))}
    n_fp8 = n_fp4 = 0
    for name, fname in index["weight_map"].items():
        st = files[fname]
        dt = st.tensors[name]["dtype"]
        if dt == "F8_E4M3":
            out_f, in_f = st.shape(name)
            vals = rows([e4m3_value(b) for b in st.raw(name)], in_f)
            scale_name = name[: -len(".weight")] + ".scale"
            scales = rows(list(files[index["weight_map"][scale_name]].raw(scale_name)), -(-in_f // 128))
            for bi in range(-(-out_f // 128)):
                for bj in range(-(-in_f // 128)):
                    amax = max(abs(v) for r in vals[bi * 128 : (bi + 1) * 128] for v in r[bj * 128 : (bj + 1) * 128])
                    # amax/448 in (1/2, 1] after scaling, unless rounding pulled it down a step
                    if not (amax <= 448 and amax > 448 / 2 * 0.93):
                        problems.append(f"{name} tile ({bi},{bj}) amax {amax} not tight (scale byte {scales[bi][bj]})")
            n_fp8 += 1
        elif dt == "I8" and ".experts." in name:
            out_f, half = st.shape(name)
            codes = []
            for b in st.raw(name):
                codes += [b & 15, b >> 4]
            vals = rows([(-1 if c & 8 else 1) * E2M1[c & 7] for c in codes], 2 * half)
            for r in vals:
                for j in range(0, 2 * half, 32):
                    amax = max(abs(v) for v in r[j : j + 32])
                    if not (amax >= 3.0):
                        problems.append(f"{name}: fp4 group amax {amax} not tight")
            n_fp4 += 1
    print(f"  {os.path.basename(folder)}: {n_fp8} FP8 and {n_fp4} FP4 tensors have tight power-of-two scales")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/data/golden/v4"
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
            check_fp8_scales(folder, problems)
    for p in problems:
        print("PROBLEM:", p)
    print("ok" if not problems else f"{len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
