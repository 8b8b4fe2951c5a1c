#!/usr/bin/env python3
"""NCCL's all-to-all between the GPUs of one host, at MoE expert-parallel dispatch and combine
sizes: the floor deepinfer's own dispatch/combine (issue 16) has to reach or beat.

Why PyTorch: the device image has torch with NCCL and no other way to reach NCCL from Python;
this measures NCCL itself (torch.distributed.all_to_all_single over the nccl backend, one
process a GPU), not anything of deepinfer's.

    python3 tools/nccl_alltoall_probe.py [--hidden 4096,5120] [--top-k 6]
        [--tokens 1,16,64,256,1024,4096] [--repeats 20] [--warmup 5] [--json OUT.json]

Each rank holds `tokens` tokens; each token goes to top-k experts spread evenly over the ranks,
so a rank sends tokens * top_k * hidden elements, 1/world of them to each rank (itself included),
as FP8 bytes plus one f32 scale per 128 elements (dispatch) and as BF16 (combine). Timed with
CUDA events around each call, after a barrier; the median over repeats of the slowest rank's
time. algbw = bytes a rank sends / time; busbw = algbw * (world - 1) / world (NCCL's convention:
what crosses the links).

NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the others the device tool requires), set
here before NCCL loads.
"""
import argparse
import json
import os
import statistics

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def per_rank_bytes(tokens, top_k, hidden, kind):
    elements = tokens * top_k * hidden
    if kind == "dispatch fp8":
        return elements + 4 * ((elements + 127) // 128)
    return 2 * elements  # combine bf16


def measure(rank, world, args, send_bytes):
    # Whole 16-byte units per peer, so every split is equal and aligned.
    unit = 16 * world
    size = max(unit, (send_bytes + unit - 1) // unit * unit)
    send = torch.empty(size, dtype=torch.uint8, device="cuda").random_(0, 255)
    recv = torch.empty_like(send)
    times = []
    for i in range(args.warmup + args.repeats):
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dist.all_to_all_single(recv, send)
        end.record()
        end.synchronize()
        t = torch.tensor([start.elapsed_time(end)], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if i >= args.warmup:
            times.append(t.item() * 1e3)  # us
    # Correctness: rank r's chunk j of recv is rank j's chunk r of send.
    chunk = size // world
    gathered = [torch.empty_like(send) for _ in range(world)]
    dist.all_gather(gathered, send)
    for j in range(world):
        if not torch.equal(recv[j * chunk:(j + 1) * chunk], gathered[j][rank * chunk:(rank + 1) * chunk]):
            raise RuntimeError(f"rank {rank}: chunk from rank {j} differs")
    return statistics.median(times), size


def worker(rank, world, args):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    rows = []
    for hidden in args.hidden:
        for kind in ("dispatch fp8", "combine bf16"):
            for tokens in args.tokens:
                median_us, size = measure(rank, world, args, per_rank_bytes(tokens, args.top_k, hidden, kind))
                algbw = size / (median_us * 1e-6) / 1e9
                rows.append({"hidden": hidden, "kind": kind, "tokens_per_rank": tokens, "bytes_per_rank": size,
                             "median_us": median_us, "algbw_GBs": algbw, "busbw_GBs": algbw * (world - 1) / world})
    if rank == 0:
        name = torch.cuda.get_device_name(0)
        print(f"{world} x {name}, torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
              f"top-{args.top_k}, median of {args.repeats} (slowest rank each)")
        print("| hidden | message | tokens/rank | bytes/rank | us | algbw GB/s | busbw GB/s |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['hidden']} | {r['kind']} | {r['tokens_per_rank']} | {r['bytes_per_rank']} | "
                  f"{r['median_us']:.1f} | {r['algbw_GBs']:.1f} | {r['busbw_GBs']:.1f} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"world": world, "device": name, "top_k": args.top_k, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ints = lambda text: [int(v) for v in text.split(",")]  # noqa: E731
    parser.add_argument("--hidden", type=ints, default=[4096, 5120])
    parser.add_argument("--top-k", type=int, default=6)
    parser.add_argument("--tokens", type=ints, default=[1, 16, 64, 256, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--port", type=int, default=29511)
    parser.add_argument("--json")
    args = parser.parse_args()
    world = torch.cuda.device_count()
    if world < 2:
        raise SystemExit(f"nccl_alltoall_probe: needs at least 2 GPUs, this machine has {world}")
    mp.spawn(worker, args=(world, args), nprocs=world, join=True)


if __name__ == "__main__":
    main()
