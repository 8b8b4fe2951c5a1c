#!/usr/bin/env python3
"""Trained V4.1 state dict -> a model folder in DeepSeek's release format (issue 7).

FP8 e4m3 with 32x32 ue8m0 block scales for the attention / indexer-query / shared-expert linears
(V4.1's `weight_block_size` [32, 32]), FP4 e2m1 routed experts (I8, two codes a byte, low nibble =
even column) with one ue8m0 scale per 32 columns of a row, BF16 for embed, head, norms, compressor,
indexer keys / weights_proj and router weight, F32 for the mHC tensors, sinks and router biases
(tests/data/golden/v41/README.md, "Tensor names"). The rounding comes from the golden tool's
quantisers (tools/golden/make_v4_golden.py), whose fixtures the engine reads; only the per-tile
exponent search is vectorised here, and checked against theirs on a sample.

Used by train.py (`export_model`); runs where torch is installed.
"""

import json
import os
import re
import shutil
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
from make_v4_golden import (  # noqa: E402
    E2M1_GRID,
    e4m3_bits,
    pow2,
    pow2_exponent_to_fit,
    quantize_fp4_rows,
    quantize_fp8_block,
    round_e2m1,
    round_e4m3,
    st_entry,
    write_safetensors,
)

FP8_BLOCK = 32
FP4_BLOCK = 32
FP8_LINEAR = re.compile(r"(attn\.(wq_a|wq_b|wkv|wo_a|wo_b)|attn\.indexer\.wq_b|ffn\.shared_experts\.w[123])\.weight$")
FP4_EXPERT = re.compile(r"ffn\.experts\.\d+\.w[123]\.weight$")
F32_STORED = re.compile(r"(hc_(attn|ffn)_(fn|base|scale)|attn\.attn_sink|ffn\.gate\.bias|ffn\.gate\.bias_vl)$")


def exponents_to_fit(amax, qmax):
    """Vectorised pow2_exponent_to_fit: smallest k with amax / 2^k <= qmax, per element."""
    r = amax.double().clamp(min=2.0**-100) / qmax
    m, e = torch.frexp(r)
    return torch.where(m == 0.5, e - 1, e).to(torch.int32)


def fp8_block(w, block=FP8_BLOCK):
    out_f, in_f = w.shape
    so, si = -(-out_f // block), -(-in_f // block)
    padded = torch.zeros(so * block, si * block, dtype=torch.float32)
    padded[:out_f, :in_f] = w
    amax = padded.view(so, block, si, block).abs().amax(dim=(1, 3))
    exps = exponents_to_fit(amax, 448.0)
    scale_full = pow2(exps.repeat_interleave(block, 0)[:out_f].repeat_interleave(block, 1)[:, :in_f], torch.float32)
    q = round_e4m3(w / scale_full)
    bits = e4m3_bits(q)
    assert torch.equal(bits, q.to(torch.float8_e4m3fn).view(torch.uint8))
    return q * scale_full, bits, (exps + 127).to(torch.uint8)


def fp4_rows(w, block=FP4_BLOCK):
    out_f, in_f = w.shape
    assert in_f % block == 0, f"FP4 rows need columns in multiples of {block}: {tuple(w.shape)}"
    wb = w.view(out_f, in_f // block, block)
    exps = exponents_to_fit(wb.abs().amax(-1), 6.0)
    q = round_e2m1(wb / pow2(exps.unsqueeze(-1), torch.float32))
    grid = torch.tensor(E2M1_GRID)
    mag = (q.abs().unsqueeze(-1) == grid).float().argmax(-1).to(torch.int32)
    assert torch.equal(grid[mag], q.abs()), "value off the e2m1 grid"
    code = (mag | (torch.signbit(q).to(torch.int32) << 3)).view(out_f, in_f)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8).view(torch.int8)
    return (q * pow2(exps.unsqueeze(-1), torch.float32)).view(out_f, in_f), packed, (exps + 127).to(torch.uint8)


def self_check():
    """The vectorised quantisers give the golden tool's bytes."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(70, 96, generator=g) * 0.05
    w[3, 5] = 0.0
    a, b = fp8_block(w), quantize_fp8_block(w, block=FP8_BLOCK)
    assert all(torch.equal(x, y) for x, y in zip(a, b)), "fp8 quantiser disagrees with the golden tool"
    a, b = fp4_rows(w[:, :64]), quantize_fp4_rows(w[:, :64].contiguous(), block=FP4_BLOCK)
    assert all(torch.equal(x, y) for x, y in zip(a, b)), "fp4 quantiser disagrees with the golden tool"
    assert pow2_exponent_to_fit(torch.tensor(448.0), 448.0) == int(exponents_to_fit(torch.tensor([448.0]), 448.0)[0])


def ds_name(name):
    """Reference state-dict name -> DeepSeek's checkpoint name."""
    if name.startswith("lm_head."):
        return "head." + name[len("lm_head."):]
    return name[len("model."):] if name.startswith("model.") else name


def quantise_state(state):
    """-> (safetensors entries, dequantised reference-named state dict: what ships, as floats)."""
    entries, shipped, counts = {}, {}, {"fp8": 0, "fp4": 0, "bf16": 0, "f32": 0}
    for name, t in state.items():
        t = t.detach().float().cpu()
        out = ds_name(name)
        if FP4_EXPERT.search(name):
            deq, packed, scale = fp4_rows(t)
            entries[out] = st_entry(packed, "I8")
            entries[out[: -len("weight")] + "scale"] = st_entry(scale, "F8_E8M0")
            counts["fp4"] += 1
        elif FP8_LINEAR.search(name):
            deq, bits, scale = fp8_block(t)
            entries[out] = st_entry(bits, "F8_E4M3")
            entries[out[: -len("weight")] + "scale"] = st_entry(scale, "F8_E8M0")
            counts["fp8"] += 1
        elif F32_STORED.search(name):
            deq = t
            entries[out] = st_entry(t.contiguous())
            counts["f32"] += 1
        else:
            deq = t.to(torch.bfloat16).float()
            entries[out] = st_entry(t.to(torch.bfloat16).contiguous())
            counts["bf16"] += 1
        shipped[name] = deq
    return entries, shipped, counts


def release_config(text_config):
    """The V4.1 release layout of config.json (tests/data/configs/v41_flash.json) for this model."""
    text = dict(text_config)
    text["model_type"] = "deepseek_v41_text"
    return {
        "architectures": ["DeepseekV41ForCausalLM"],
        "model_type": "deepseek_v41",
        "image_token_id": 129264,
        "quantization_config": {
            "activation_scheme": "dynamic",
            "expert_dtype": "fp4",
            "quant_method": "fp8",
            "scale_fmt": "ue8m0",
            "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
        },
        "tie_word_embeddings": False,
        "text_config": text,
    }


def export_model(state, text_config, tokenizer_path, out_dir, shard_bytes=15 * 1024 * 1024):
    """Writes out_dir/{config.json, tokenizer.json, model-*.safetensors, model.safetensors.index.json};
    returns (dequantised state dict, summary)."""
    self_check()
    os.makedirs(out_dir, exist_ok=True)
    entries, shipped, counts = quantise_state(state)
    shards, cur, size = [], {}, 0
    for k in sorted(entries, key=lambda n: (n not in ("embed.weight",), n)):  # embed alone first
        n = len(entries[k][2])
        if cur and size + n > shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = entries[k]
        size += n
    if cur:
        shards.append(cur)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_safetensors(os.path.join(out_dir, fname), shard, {"format": "pt"})
        for k in shard:
            weight_map[k] = fname
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=1)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(release_config(text_config), f, indent=2)
    shutil.copyfile(tokenizer_path, os.path.join(out_dir, "tokenizer.json"))
    folder_bytes = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    return shipped, {"tensors": counts, "weight_bytes": total, "folder_bytes": folder_bytes, "shards": len(shards)}
