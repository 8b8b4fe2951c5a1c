#!/usr/bin/env python3
"""Where one decode step's GPU time goes, from an Nsight Compute CSV of `decode_step_bench`.

Why this exists: the step's ratio to its byte bound says how far it is from the goal, not which
kernels hold it there. ncu times every launch of an eager run (each kernel alone, so no overlap
between them); this script keeps the launches of the last decode step and sums them by kernel and
by part of the model, each part against the bytes it read from DRAM over the copy bandwidth.

    ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size \\
        --csv decode_step_bench --model DIR --device cuda --shared-prefill --context 4096 \\
        --enforce-eager --steps 1 --repeat 1 --warmup 1 --batch 64 > step.csv
    python3 tools/ncu_step_breakdown.py step.csv --bandwidth 4276.8 [--kernels 30]

The last step starts at the last launch of the embedding kernel (every step's first). Copy
bandwidth in GB/s (decode_step_bench prints it). Standard library only (the device's python3).
"""
import argparse
import collections
import csv
import re
import sys

# Part of the model for each kernel name (the first pattern that matches).
PARTS = [
    ("routed experts", r"gate_up|down_kernel|expert_wgmma"),
    ("dense FP8 linears", r"linear_wgmma_kernel<2|linear_mma_kernel<2|linear_kernel<2"),
    ("BF16 linears (head)", r"linear_wgmma_kernel<1|linear_mma_kernel<1|linear_kernel<1"),
    ("linear split / range sums", r"split_for_wgmma|add_ranges|split_rows"),
    ("mHC", r"linear_rows|hc_"),
    ("sink attention", r"sink_attention"),
    ("indexer and top-k", r"index_scores|top_k|candidate_blocks|keep_kernel"),
    ("router and MoE glue", r"route_kernel|moe_|swiglu|gather_rows"),
]


def short_name(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"deepinfer::(kernels::cuda::)?|\(anonymous namespace\)::|<unnamed>::", "", name)
    return name.split("(")[0]


def launches(path):
    rows = list(csv.reader(open(path, newline="")))
    header_at = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if header_at is None:
        sys.exit(f"{path}: no ncu table (was ncu run with --csv?)")
    header = rows[header_at]
    kernel, metric, value = header.index("Kernel Name"), header.index("Metric Name"), header.index("Metric Value")
    by_id = collections.OrderedDict()
    for r in rows[header_at + 1:]:
        if len(r) <= value:
            continue
        entry = by_id.setdefault(r[0], {"name": r[kernel]})
        entry[r[metric]] = float(r[value].replace(",", "") or 0)
    return list(by_id.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--bandwidth", type=float, required=True, help="copy bandwidth, GB/s")
    parser.add_argument("--kernels", type=int, default=30, help="kernel rows to print")
    args = parser.parse_args()

    every = launches(args.csv)
    starts = [i for i, l in enumerate(every) if "embed_kernel" in l["name"]]
    if not starts:
        sys.exit("no embedding launch: is this a decode_step_bench run?")
    step = every[starts[-1]:]
    us = lambda l: l.get("gpu__time_duration.sum", 0.0) / 1e3  # ns -> us
    mb = lambda l: l.get("dram__bytes_read.sum", 0.0) / 1e6
    total_us, total_mb = sum(map(us, step)), sum(map(mb, step))
    bound_us = lambda megabytes: megabytes / args.bandwidth * 1e3
    print(f"last step: {len(step)} launches, {total_us:.1f} us summed, {total_mb:.1f} MB read "
          f"(bound {bound_us(total_mb):.1f} us at {args.bandwidth:.1f} GB/s)\n")

    parts = collections.defaultdict(lambda: [0.0, 0.0, 0])
    kernels = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for l in step:
        name = short_name(l["name"])
        part = next((p for p, pattern in PARTS if re.search(pattern, name)), "other")
        for table, key in ((parts, part), (kernels, name)):
            table[key][0] += us(l)
            table[key][1] += mb(l)
            table[key][2] += 1

    def table(title, rows, limit):
        print(f"| {title} | launches | us | share | MB read | bound us | time / bound |")
        print("|---|---|---|---|---|---|---|")
        for key, (t, b, n) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:limit]:
            ratio = f"{t / bound_us(b):.1f}x" if b > 0 else "-"
            print(f"| {key} | {n} | {t:.1f} | {100 * t / total_us:.1f}% | {b:.1f} | {bound_us(b):.1f} | {ratio} |")
        print()

    table("part", parts, len(parts))
    table("kernel", kernels, args.kernels)


if __name__ == "__main__":
    main()
