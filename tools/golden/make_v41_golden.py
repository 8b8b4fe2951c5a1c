#!/usr/bin/env python3
"""Make the DeepSeek-V4.1 golden fixtures (tests/data/golden/v41/*) from the transformers reference.

Runs where torch + transformers 5.17 + tokenizers + numpy are installed. The public
`deepseek_v41` reference is not part of transformers 5.17: --ref-dir names a folder holding its
three files (__init__.py, configuration_deepseek_v41.py, modeling_deepseek_v41.py), which this
script copies into the installed tree as `transformers/models/deepseek_v41/` and imports.

All reference compute is CPU fp32 on weights first rounded to their storage format (bf16, or
FP8/FP4 then dequantised), so an engine that reads the stored weights and computes in fp32 must
reproduce the logits to ~1e-5 (see README for the fake-quantisation caveat).

Every forward gets a FRESH hand-built cache: `DynamicCache(config=...)` raises for V4.1 in 5.17,
and `use_cache=False` is wrong with two or more kv sources (the no-cache path appends the second
source's compressed entries to the first one's instead of replacing them).

Usage: python3 make_v41_golden.py --out DIR --ref-dir DIR --tokenizer FILE [--only tiny_bf16,tiny_fp8]
"""

import argparse
import copy
import hashlib
import json
import math
import os
import re
import sys
import time
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/
import ref41_install  # noqa: E402
from make_v4_golden import (  # noqa: E402  (shared quantisers and safetensors writer)
    dequant_fp4_bytes,
    dequant_fp8_bytes,
    e4m3_bits,
    pow2,
    quantize_fp4_rows,
    quantize_fp8_block,
    read_safetensors_header,
    round_e4m3,
    st_entry,
    versions,
    write_safetensors,
)

M = None  # the reference modeling module, set by install_reference()
C = None  # the reference configuration module


# ----------------------------------------------------------------------------------------------
# Architecture (the `text_config` of config.json). Engram sizes that depend on the tokenizer and
# the prime layout are filled in by complete_text_config().

YARN = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32.0, "beta_slow": 1.0}

TINY_TEXT = {
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    # 64 = 2 x 32 and 4 x 16: the window-KV FP8 (block 32) and compressed-KV FP4 (block 16)
    # fake-quantisers only run when head_dim is a multiple of their block.
    "head_dim": 64,
    "qk_rope_head_dim": 16,
    "q_lora_rank": 32,
    "o_groups": 2,
    "o_lora_rank": 32,
    "sliding_window": 8,
    # SWA, SWA, ratio-2 group {2: Full, 3: Reuse}, ratio-1 group {4: Full + candidate source,
    # 5: Reuse, 6: Reindex (own indexer inside the candidate pool), 7: Reuse of layer 6's top-k}
    "compress_ratios": [0, 0, 2, 2, 1, 1, 1, 1],
    "kv_source_layer_ids": [2, 4],
    "index_source_layer_ids": [2, 4, 6],
    "candidate_source_layer_id": 4,
    # 3 blocks of 4 entries = a pool of 12: from position 12 on layer 6 sees more entries than the pool
    "candidate_topk_blocks": 3,
    "candidate_block_size": 4,
    "index_n_heads": 8,
    # 32: the indexer's FP4 fake-quantiser (block 32) runs on q and k
    "index_head_dim": 32,
    "index_topk": 6,
    "rope_theta": 10000.0,
    "compress_rope_theta": 160000.0,
    "rope_scaling": YARN,
    "max_position_embeddings": 1048576,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "gate_temp": 1.0,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.5,
    # released: 10; 2.0 makes the clamp bite on tiny random activations
    "swiglu_limit": 2.0,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-6,
    "rms_norm_eps": 1e-20,
    "engram_layer_ids": [1, 5],
    "engram_vocab_size": 200,
    "engram_max_ngram_size": 4,
    # 2 heads x 3 n-gram sizes: (n-gram, head) and (head, n-gram) column orders differ
    "engram_n_heads": 2,
    "engram_head_dim": 64,
    "engram_pad_id": 2,
    "num_nextn_predict_layers": 0,
    "hidden_act": "silu",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "tie_word_embeddings": False,
    "use_cache": True,
}

QUANT_CONFIG = {
    "quant_method": "fp8",
    "activation_scheme": "dynamic",
    "scale_fmt": "ue8m0",
    "weight_block_size": [32, 32],
    "expert_dtype": "fp4",
}

GREEDY_MARGIN = 5e-3  # min top1-top2 logit gap on every greedy step
INDEXER_REL_MARGIN = 1e-4  # min gap at an indexer's top-k boundary, relative to max |score| (fp32 error ~1e-6)
CANDIDATE_REL_MARGIN = 1e-4  # same for the candidate-block top-k
ROUTER_MARGIN = 1e-4  # min gap at the router's top-k boundary (sqrtsoftplus + bias)
LEAK_LIMIT = 1e-4  # max |full forward - prefix forward| logits (causality)
FP64_LIMIT = 1e-4  # max |fp64 forward - fp32 forward| logits (no fake-quant rounding flips)

F32_STORED = re.compile(r"(hc_(attn|ffn)_(fn|base|scale)|attn\.attn_sink|ffn\.gate\.bias|ffn\.gate\.bias_vl)$")


def install_reference(ref_dir):
    global M, C
    C, M, info = ref41_install.install_reference(ref_dir)
    return info


def load_tokenizer(path):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(path))


def engram_primes(text):
    """The reference's prime layout ([L][n-gram-1][heads]) from its own helper."""
    seen, primes = set(), []
    for _ in text["engram_layer_ids"]:
        per = []
        for _ in range(text["engram_max_ngram_size"] - 1):
            cur, sizes = text["engram_vocab_size"] - 1, []
            for _ in range(text["engram_n_heads"]):
                cur = M._find_next_prime(cur, seen)
                seen.add(cur)
                sizes.append(cur)
            per.append(sizes)
        primes.append(per)
    return primes


def complete_text_config(text, compressed_vocab_size):
    t = copy.deepcopy(text)
    t["engram_num_embeddings"] = [sum(sum(p) for p in layer) for layer in engram_primes(t)]
    t["engram_compressed_vocab_size"] = compressed_vocab_size
    compress = build_config(t).get_text_config().rope_parameters["compress"]
    if compress.get("rope_type") != "yarn":
        # the reference dropped YaRN from `rope_scaling`: spell the per-rope-type dict out
        print(f"  WARNING: rope_scaling gave compress rope {compress}; writing rope_parameters explicitly")
        partial = t["qk_rope_head_dim"] / t["head_dim"]
        t["rope_parameters"] = {
            "main": {"rope_type": "default", "rope_theta": t["rope_theta"], "partial_rotary_factor": partial},
            "compress": dict(YARN, rope_theta=t["compress_rope_theta"], partial_rotary_factor=partial, attention_factor=1.0),
        }
    return t


def build_config(text):
    cfg = C.DeepseekV41Config(text_config=copy.deepcopy(text))
    for c in (cfg, cfg.get_text_config()):
        try:
            c._attn_implementation = "eager"
        except Exception as e:
            print(f"  note: setting eager on {type(c).__name__} failed: {e}")
    return cfg


class TokenMap:
    """The compressed token map, built once with the reference's function and bound to each model."""

    def __init__(self, tokenizer, pad_token_id):
        t0 = time.time()
        self.tokenizer = tokenizer
        self.lookup, self.size = M.build_compressed_token_map(tokenizer)
        self.pad_token_id = pad_token_id
        self.seconds = round(time.time() - t0, 1)
        raw = torch.tensor(self.lookup, dtype=torch.int32).numpy().astype("<i4").tobytes()
        self.sha256 = hashlib.sha256(raw).hexdigest()
        self.bound_once = False

    def bind(self, model):
        hs = model.model.engram_hash_state
        if not self.bound_once:
            model.model.bind_tokenizer(self.tokenizer)  # the reference's own path, once
            assert hs.token_map.tolist() == self.lookup
            self.bound_once = True
        else:  # same result, without re-decoding 129k tokens for every seed
            hs.pad_id = self.lookup[hs.engram_pad_id]
            hs.token_map = torch.tensor(self.lookup, device=hs.primes.device)


def make_model(cfg, token_map):
    model = M.DeepseekV41ForCausalLM(cfg).float().eval()
    token_map.bind(model)
    return model


# ----------------------------------------------------------------------------------------------
# Random weights. _init_weights zeroes sinks and router biases, sets mHC scales and the engram
# q/k weights to 1: every parameter is drawn here instead.


def randomize(model, tc, seed):
    g = torch.Generator().manual_seed(seed)
    D, hc = tc.hidden_size, tc.hc_mult

    def normal(shape, std):
        return torch.randn(shape, generator=g) * std

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=g)

    with torch.no_grad():
        for name, p in model.named_parameters():
            s = tuple(p.shape)
            if name == "model.embed.weight":
                v = normal(s, 1.0)
            elif name == "lm_head.weight":
                v = normal(s, 2.0 / math.sqrt(D))
            elif name.endswith("norm.weight"):
                v = uniform(s, 0.5, 1.5)
            elif re.search(r"hc_(attn|ffn)_fn$", name):
                v = normal(s, 1.0 / math.sqrt(hc * D))
            elif re.search(r"hc_(attn|ffn)_base$", name):
                v = normal(s, 0.5)
            elif re.search(r"hc_(attn|ffn)_scale$", name):
                v = uniform(s, 0.5, 1.5)
            elif name.endswith("attn.attn_sink"):
                v = normal(s, 1.0)
            elif name.endswith("ffn.gate.bias") or name.endswith("ffn.gate.bias_vl"):
                v = normal(s, 0.1)
            elif name.endswith("engram.embed.weight"):
                v = normal(s, 1.0)
            elif name.endswith("engram.embed.scale"):
                # unused by a float table (the reference applies it only to an fp8 table); powers
                # of two != 1 so an engine that applies it to a BF16 table fails the fixture
                v = pow2(torch.randint(-2, 3, s, generator=g), torch.float32)
            elif name.endswith("engram.q_weight") or name.endswith("engram.k_weight"):
                v = uniform(s, 0.5, 1.5) * torch.where(torch.rand(s, generator=g) < 0.2, -1.0, 1.0)
            elif name.endswith(".weight") and p.dim() == 2:
                v = normal(s, 1.0 / math.sqrt(s[-1]))
            else:
                raise RuntimeError(f"no init rule for parameter {name} {s}")
            p.copy_(v)
        for name, b in model.named_buffers():
            if "inv_freq" in name or re.search(r"engram_hash_state\.(primes|offsets|multipliers|token_map)$", name):
                continue  # deterministic tables / the tokenizer's map
            print(f"  WARNING: buffer {name} {tuple(b.shape)} left as initialised")


def round_to_bf16_storage(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not F32_STORED.search(name):
                p.copy_(p.to(torch.bfloat16).float())


# ----------------------------------------------------------------------------------------------
# Forward passes (always with a fresh, hand-built cache)


def fresh_cache(tc):
    from transformers.cache_utils import DynamicCache, DynamicSlidingWindowLayer

    layers = [
        M.DeepseekV41CSACache(tc) if i in tc.kv_source_layer_ids else DynamicSlidingWindowLayer(sliding_window=tc.sliding_window)
        for i in range(tc.num_hidden_layers)
    ]
    cache = DynamicCache()
    cache.layers = layers
    return cache


def forward(model, tc, ids, cache=None):
    cache = fresh_cache(tc) if cache is None else cache
    out = model(input_ids=ids.view(1, -1), past_key_values=cache, use_cache=True)
    return out.logits[0].float(), cache


def chunked_logits(model, tc, ids, size):
    cache, rows = fresh_cache(tc), []
    for s in range(0, ids.numel(), size):
        lg, cache = forward(model, tc, ids[s : s + size], cache)
        rows.append(lg)
    return torch.cat(rows)


def greedy(model, tc, prompt, steps):
    lg, cache = forward(model, tc, prompt)
    row = lg[-1]
    ids, logits, margin = [], [], float("inf")
    for step in range(steps):
        top2 = torch.topk(row, 2).values
        margin = min(margin, float(top2[0] - top2[1]))
        nxt = int(torch.argmax(row))
        ids.append(nxt)
        logits.append(row)
        if step + 1 < steps:
            lg, cache = forward(model, tc, torch.tensor([nxt]), cache)
            row = lg[-1]
    return torch.tensor(ids, dtype=torch.long), torch.stack(logits), margin


# ----------------------------------------------------------------------------------------------
# Probe: hooks on decoder layers, indexers, routers, the LM head and the engram hash state.


class Probe:
    def __init__(self, model, tc):
        self.tc = tc
        self.active = False
        self.index_layers = [i for i in tc.index_source_layer_ids]
        self.reset()
        for i, layer in enumerate(model.model.layers):
            layer.register_forward_hook(self._layer_hook(i))
            if layer.attn.indexer is not None:
                layer.attn.indexer.register_forward_hook(self._indexer_hook(i))
            layer.ffn.gate.register_forward_hook(self._router_hook(i))
        model.lm_head.register_forward_hook(self._head_hook)
        if model.model.engram_hash_state is not None:
            model.model.engram_hash_state.register_forward_hook(self._hash_hook)

    def reset(self):
        self.streams, self.index_sel, self.experts, self.weights = {}, {}, {}, {}
        self.final = self.hash_ids = self.cand_sel = None
        self.m = {
            "indexer_min_rel_gap": float("inf"),
            "indexer_exact_ties": 0,
            "indexer_decisions": 0,
            "indexer_recompute_mismatches": 0,
            "candidate_min_rel_gap": float("inf"),
            "candidate_exact_ties": 0,
            "candidate_decisions": 0,
            "router_min_gap": float("inf"),
            "candidate_excluded_rows": 0,
            "candidate_changed_selection_rows": 0,
        }

    def _layer_hook(self, i):
        def hook(module, args, output):
            if self.active:
                self.streams[i] = output[0][0].float().clone()

        return hook

    def _head_hook(self, module, args, output):
        if self.active:
            self.final = args[0][0].float().clone()

    def _hash_hook(self, module, args, output):
        if self.active:
            self.hash_ids = output[0].clone()

    def _router_hook(self, i):
        def hook(module, args, output):
            if not self.active:
                return
            logits, weights, indices = output
            sel = module.score_fn(logits.float()) + module.bias.float()
            vals = torch.sort(sel, dim=-1, descending=True).values
            k = module.top_k
            self.m["router_min_gap"] = min(self.m["router_min_gap"], float((vals[:, k - 1] - vals[:, k]).min()))
            order = torch.argsort(indices, dim=-1)
            self.experts[i] = indices.gather(-1, order).clone()
            self.weights[i] = weights.float().gather(-1, order).clone()

        return hook

    def _indexer_hook(self, i):
        def hook(module, args, output):
            if not self.active:
                return
            hidden, q_res, _latent, _first, pos_ids, _cache_layer, shared = args
            index_k = shared.get("index_k")
            if index_k is None or index_k.shape[2] == 0:
                return
            B, S, _ = hidden.shape
            # the reference's scoring, recomputed with its own functions (it keeps no scores)
            cos_q, sin_q = module.rotary_emb(hidden, position_ids=pos_ids, layer_type="compress")
            q = module.wq_b(q_res).view(B, S, module.num_heads, module.head_dim)
            q = M.apply_rotary_pos_emb(q, cos_q, sin_q)
            q = M._fake_quant_fp4_block(q, block_size=32)
            sc = torch.einsum("bshd,btd->bsht", q.float(), index_k[:, 0].float()).relu() * module.softmax_scale
            w = module.weights_proj(hidden).float() * module.heads_scaling
            s = (sc * w.unsqueeze(-1)).sum(dim=2)
            n = s.shape[-1]
            lens = (pos_ids.long().unsqueeze(-1) + 1) // module.compress_ratio
            s = s.masked_fill(torch.arange(n).view(1, 1, -1) >= lens, float("-inf"))
            if module.is_candidate_source:
                self._candidates(module, s, lens, shared["candidates"])
            elif module.uses_candidates and shared.get("candidates") is not None:
                unpooled = s
                s = s.masked_fill(~shared["candidates"], float("-inf"))
                kk = min(module.index_topk, n)
                for t in range(S):
                    visible = unpooled[0, t] > float("-inf")
                    if (visible & ~shared["candidates"][0, t]).any():
                        self.m["candidate_excluded_rows"] += 1
                        a = set(torch.topk(unpooled[0, t], min(kk, int(visible.sum()))).indices.tolist())
                        b = set(torch.topk(s[0, t], min(kk, int((s[0, t] > float("-inf")).sum()))).indices.tolist())
                        self.m["candidate_changed_selection_rows"] += int(a != b)
            k = min(module.index_topk, n)
            chosen = shared["topk_bias"][0, 0] == 0  # [S, n]
            rows = []
            for t in range(S):
                row = s[0, t]
                fin = row[row > float("-inf")]
                mine = torch.zeros(n, dtype=torch.bool)
                if fin.numel():
                    mine[torch.topk(row, min(k, fin.numel())).indices] = True
                if not torch.equal(mine, chosen[t]):
                    self.m["indexer_recompute_mismatches"] += 1
                if fin.numel() > k:
                    vals = torch.sort(fin, descending=True).values
                    gap = float(vals[k - 1] - vals[k])
                    self.m["indexer_decisions"] += 1
                    self.m["indexer_exact_ties"] += int(gap == 0.0)
                    rel = gap / (float(vals.abs().max()) + 1e-30)
                    self.m["indexer_min_rel_gap"] = min(self.m["indexer_min_rel_gap"], rel)
                idx = torch.nonzero(chosen[t]).flatten()
                rows.append(torch.cat([idx, torch.full((module.index_topk - idx.numel(),), -1, dtype=torch.long)]))
            self.index_sel[i] = torch.stack(rows)

        return hook

    def _candidates(self, module, s, lens, cand):
        bs, kb = module.candidate_block_size, module.candidate_topk_blocks
        n = s.shape[-1]
        blk = F.pad(s, (0, -n % bs), value=float("-inf")).unflatten(-1, (-1, bs)).amax(dim=-1)
        nb = blk.shape[-1]
        blk = blk.masked_fill(torch.arange(nb).view(-1) == (lens - 1) // bs, float("inf"))
        k = min(kb, nb)
        rows = []
        for t in range(s.shape[1]):
            v = blk[0, t]
            reach = v[v > float("-inf")]
            if reach.numel() > k:
                vals = torch.sort(reach, descending=True).values
                gap = float(vals[k - 1] - vals[k])
                finite = vals[torch.isfinite(vals)]
                self.m["candidate_decisions"] += 1
                self.m["candidate_exact_ties"] += int(gap == 0.0)
                rel = gap / (float(finite.abs().max()) + 1e-30) if finite.numel() else float("inf")
                self.m["candidate_min_rel_gap"] = min(self.m["candidate_min_rel_gap"], rel)
            picked = torch.nonzero(cand[0, t][::bs][:nb]).flatten()
            rows.append(torch.cat([picked, torch.full((kb - picked.numel(),), -1, dtype=torch.long)]))
        self.cand_sel = torch.stack(rows)

    def snapshot(self):
        L = self.tc.num_hidden_layers
        return {
            "layer_streams": torch.stack([self.streams[i] for i in range(L)], dim=1),  # [T, L, hc, D]
            "final_hidden": self.final,
            "engram_hash_ids": self.hash_ids,  # [T, n_engram_layers, cols]
            "indexer_topk": torch.stack([self.index_sel[i] for i in self.index_layers], dim=1),  # [T, n_idx, topk]
            "candidate_blocks": self.cand_sel,  # [T, candidate_topk_blocks]
            "moe_experts": torch.stack([self.experts[i] for i in range(L)], dim=1),  # [T, L, k]
            "moe_weights": torch.stack([self.weights[i] for i in range(L)], dim=1),
        }


def margin_problem(m, where):
    if m["indexer_recompute_mismatches"]:
        return f"{where}: indexer recompute disagrees with the reference on {m['indexer_recompute_mismatches']} rows"
    if m["indexer_exact_ties"] or m["indexer_min_rel_gap"] < INDEXER_REL_MARGIN:
        return f"{where}: indexer rel gap {m['indexer_min_rel_gap']:.3g}, ties {m['indexer_exact_ties']}"
    if m["candidate_exact_ties"] or m["candidate_min_rel_gap"] < CANDIDATE_REL_MARGIN:
        return f"{where}: candidate rel gap {m['candidate_min_rel_gap']:.3g}, ties {m['candidate_exact_ties']}"
    if m["router_min_gap"] < ROUTER_MARGIN:
        return f"{where}: router gap {m['router_min_gap']:.3g}"
    return None


def evaluate(model, tc, ids, prompt, steps, probe):
    """Everything a fixture stores, or (None, reason) when a decision is near a tie."""
    T, P = ids.numel(), prompt.numel()
    probe.reset()
    probe.active = True
    logits, cache = forward(model, tc, ids)
    probe.active = False
    m_full = dict(probe.m)
    if margin_problem(m_full, "full"):
        return None, margin_problem(m_full, "full")
    snap = probe.snapshot()
    csa_cache = {}
    for src in tc.kv_source_layer_ids:
        layer = cache.layers[src]
        csa_cache[f"csa_cache_kv_layer{src}"] = layer.compressed_kv["compressor"][0, 0].float().clone()
        csa_cache[f"csa_cache_index_k_layer{src}"] = layer.compressed_kv["indexer"][0, 0].float().clone()

    g_ids, g_logits, g_margin = greedy(model, tc, prompt, steps)
    if g_margin < GREEDY_MARGIN:
        return None, f"greedy top1-top2 margin {g_margin:.3g}"
    probe.reset()
    probe.active = True
    seq = torch.cat([prompt, g_ids[:-1]])
    v_logits, _ = forward(model, tc, seq)
    probe.active = False
    m_greedy = dict(probe.m)
    if margin_problem(m_greedy, "greedy sequence"):
        return None, margin_problem(m_greedy, "greedy sequence")

    prefix = torch.stack([forward(model, tc, ids[: t + 1])[0][-1] for t in range(T)])
    leak = (prefix - logits).abs().max(-1).values
    if float(leak.max()) > LEAK_LIMIT:
        return None, f"not causal: prefix vs full forward differ by {float(leak.max()):.3g}"

    fp64 = None
    try:
        m64 = copy.deepcopy(model).double()
        fp64 = float((forward(m64, tc, ids)[0].float() - logits).abs().max())
        del m64
    except Exception as e:
        fp64 = f"fp64 forward failed: {type(e).__name__}: {e}"
    if isinstance(fp64, float) and fp64 > FP64_LIMIT:
        return None, f"rounding-fragile: fp64 vs fp32 logits differ by {fp64:.3g}"

    chunked = {size: chunked_logits(model, tc, ids, size) for size in (5, 13)}
    checks = {
        "prefix_vs_full_max_abs": float(leak.max()),
        "prefix_vs_full_max_abs_per_position": [float(x) for x in leak],
        "fp64_vs_fp32_full_forward_max_abs": fp64,
        "chunked5_vs_full_max_abs": float((chunked[5] - logits).abs().max()),
        "chunked13_vs_full_max_abs": float((chunked[13] - logits).abs().max()),
        "greedy_decode_vs_full_forward_max_abs": float((v_logits[P - 1 :] - g_logits).abs().max()),
        "greedy_prompt_last_row_vs_full_max_abs": float((g_logits[0] - logits[P - 1]).abs().max()),
    }
    try:
        nc = model(input_ids=ids.view(1, -1), use_cache=False).logits[0].float()
        checks["use_cache_false_vs_full_max_abs"] = float((nc - logits).abs().max())
    except Exception as e:
        checks["use_cache_false_vs_full_max_abs"] = f"failed: {type(e).__name__}: {e}"
    margins = {
        "greedy_min_top1_top2": g_margin,
        "full_forward": m_full,
        "greedy_sequence_forward": m_greedy,
    }
    return {
        "logits": logits,
        "snap": snap,
        "csa_cache": csa_cache,
        "greedy_ids": g_ids,
        "greedy_logits": g_logits,
        "chunked": chunked,
        "checks": checks,
        "margins": margins,
    }, None


def seed_search(name, builder, tc, ids, prompt, steps, first_seed, max_seeds, deadline, meta):
    tried = []
    for seed in range(first_seed, first_seed + max_seeds):
        if time.time() > deadline:
            break
        t0 = time.time()
        model, extra = builder(seed)
        probe = Probe(model, tc)
        with torch.no_grad():
            result, reason = evaluate(model, tc, ids, prompt, steps, probe)
        tried.append({"seed": seed, "rejected": reason, "seconds": round(time.time() - t0, 2)})
        print(f"[{name}] seed {seed}: {'REJECT ' + reason if reason else 'accept'} ({time.time() - t0:.1f}s)", flush=True)
        if result:
            meta["seed"] = seed
            meta["seeds_tried"] = tried
            meta["margins"] = result["margins"]
            meta["checks"] = result["checks"]
            return model, extra, result
    meta["seeds_tried"] = tried
    raise RuntimeError(f"{name}: no seed passed the checks ({len(tried)} tried)")


# ----------------------------------------------------------------------------------------------
# Cross-checks of docs/v4_arch.md (section 2.10) against the reference


def spec_engram(tc, lookup, ids):
    """Engram tables and hashes recomputed from the spec text alone, in plain Python integers."""
    import numpy as np

    V, H, N = tc.engram_vocab_size, tc.engram_n_heads, tc.engram_max_ngram_size
    cvs = tc.engram_compressed_vocab_size

    def is_prime(n):
        return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))

    primes, cur = [], V - 1
    for _ in tc.engram_layer_ids:
        layer = []
        for _ in range(N - 1):
            heads = []
            for _ in range(H):
                cur += 1
                while not is_prime(cur):
                    cur += 1
                heads.append(cur)
            layer.append(heads)
        primes.append(layer)
    offsets = []
    for layer in primes:
        flat = [p for per in layer for p in per]
        offsets.append([sum(flat[:j]) for j in range(len(flat))])
    bound = max(1, ((2**63 - 1) // cvs) // 2)
    mults = [
        [int(x) * 2 + 1 for x in np.random.default_rng(10007 * l).integers(0, bound, size=N, dtype=np.int64)]
        for l in tc.engram_layer_ids
    ]
    pad = lookup[tc.engram_pad_id]
    hashes = []
    for p in range(len(ids)):
        per_layer = []
        for li in range(len(tc.engram_layer_ids)):
            rolling, cols = 0, []
            for s in range(N):
                v = pad if p - s < 0 else lookup[int(ids[p - s])]
                rolling ^= v * mults[li][s]
                if s >= 1:
                    cols += [rolling % primes[li][s - 1][k] + offsets[li][(s - 1) * H + k] for k in range(H)]
            per_layer.append(cols)
        hashes.append(per_layer)
    return primes, offsets, mults, hashes


def engram_checks(model, tc, token_map, ids, ref_hashes):
    hs = model.model.engram_hash_state
    primes, offsets, mults, hashes = spec_engram(tc, token_map.lookup, ids)
    return {
        "spec_primes_match": hs.primes.tolist() == primes,
        "spec_offsets_match": hs.offsets.tolist() == offsets,
        "spec_multipliers_match": hs.multipliers.tolist() == mults,
        "spec_hash_ids_match_reference": ref_hashes.tolist() == hashes,
        "num_embeddings_equal_prime_sums": list(tc.engram_num_embeddings) == [sum(sum(p) for p in l) for l in primes],
        "compressed_vocab_size": token_map.size,
        "tokenizer_len": len(token_map.lookup),
        "pad_token_compressed_id": token_map.lookup[tc.engram_pad_id],
        "token_map_sha256_int32_le": token_map.sha256,
        "token_map_seconds": token_map.seconds,
    }


def yarn_check(model, tc):
    rot = model.model.rotary_emb
    dim = tc.qk_rope_head_dim
    base, ys = tc.compress_rope_theta, YARN
    f = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))

    def cd(k):
        return dim * math.log(ys["original_max_position_embeddings"] / (k * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(cd(ys["beta_fast"])), 0)
    high = min(math.ceil(cd(ys["beta_slow"])), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    yarn = f * (1 - ramp) + f / ys["factor"] * ramp
    ref = rot.compress_inv_freq.double()
    main = 1.0 / (tc.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    return {
        "rope_parameters": json.loads(json.dumps(tc.rope_parameters, default=str)),
        "compress_inv_freq_max_rel_diff_vs_yarn_spec": float(((ref - yarn).abs() / yarn).max()),
        "compress_inv_freq_max_rel_diff_vs_plain": float(((ref - f).abs() / f).max()),
        "main_inv_freq_max_rel_diff_vs_spec": float(((rot.main_inv_freq.double() - main).abs() / main).max()),
        "compress_attention_scaling": float(rot.compress_attention_scaling),
        "yarn_low_high": [low, high],
    }


# ----------------------------------------------------------------------------------------------
# Fixture assembly


def nested_config(text, quantized):
    cfg = {
        "architectures": ["DeepseekV41ForCausalLM"],
        "model_type": "deepseek_v41",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "text_config": copy.deepcopy(text),
    }
    if quantized:
        cfg["quantization_config"] = dict(QUANT_CONFIG)
    return cfg


def config_roundtrip(folder, tc, model):
    """Does the reference read our config.json back to the same text config?"""
    try:
        raw = json.load(open(os.path.join(folder, "config.json")))
        cfg = C.DeepseekV41Config(**{k: v for k, v in raw.items() if k not in ("architectures", "torch_dtype", "model_type")})
        t = cfg.get_text_config()
        keys = [
            "compress_ratios", "kv_source_layer_ids", "index_source_layer_ids", "candidate_source_layer_id",
            "layer_types", "rope_parameters", "engram_num_embeddings", "engram_compressed_vocab_size",
        ]
        diffs = [k for k in keys if json.dumps(getattr(t, k), default=str, sort_keys=True) != json.dumps(getattr(tc, k), default=str, sort_keys=True)]
        return {"parsed": True, "differing_keys": diffs, "quantization_config": str(getattr(cfg, "quantization_config", None))}
    except Exception as e:
        return {"parsed": False, "error": f"{type(e).__name__}: {e}"}


def describe_checkpoint(folder):
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    names, dtypes = {}, {}
    for f in files:
        h, _ = read_safetensors_header(os.path.join(folder, f))
        for k, v in h.items():
            if k == "__metadata__":
                continue
            names[k] = {"dtype": v["dtype"], "shape": v["shape"], "file": f}
            dtypes[v["dtype"]] = dtypes.get(v["dtype"], 0) + 1
    return {"files": files, "dtype_counts": dtypes, "tensors": names}


def golden_entries(ids, prompt, result, model, token_map, tc, with_token_map):
    s = result["snap"]
    hs = model.model.engram_hash_state
    e = {
        "input_ids": st_entry(ids),
        "logits": st_entry(result["logits"]),
        "chunked5_logits": st_entry(result["chunked"][5]),
        "chunked13_logits": st_entry(result["chunked"][13]),
        "layer_streams": st_entry(s["layer_streams"].contiguous()),
        "final_hidden": st_entry(s["final_hidden"]),
        "indexer_topk": st_entry(s["indexer_topk"].long()),
        "candidate_blocks": st_entry(s["candidate_blocks"].long()),
        "moe_experts": st_entry(s["moe_experts"].long()),
        "moe_weights": st_entry(s["moe_weights"].contiguous()),
        "engram_hash_ids": st_entry(s["engram_hash_ids"].long().contiguous()),
        "engram_multipliers": st_entry(hs.multipliers.long()),
        "engram_primes": st_entry(hs.primes.long()),
        "engram_offsets": st_entry(hs.offsets.long()),
        "engram_compressed_vocab_size": st_entry(torch.tensor([token_map.size], dtype=torch.long)),
        "greedy_prompt_ids": st_entry(prompt),
        "greedy_ids": st_entry(result["greedy_ids"]),
        "greedy_logits": st_entry(result["greedy_logits"]),
        "rope_inv_freq_main": st_entry(model.model.rotary_emb.main_inv_freq.float()),
        "rope_inv_freq_compress": st_entry(model.model.rotary_emb.compress_inv_freq.float()),
    }
    for k, v in result["csa_cache"].items():
        e[k] = st_entry(v.contiguous())
    if with_token_map:
        e["engram_token_map"] = st_entry(torch.tensor(token_map.lookup, dtype=torch.int32))
    return e


def finish_fixture(name, folder, model, tc, ids, prompt, result, token_map, meta, with_token_map):
    entries = golden_entries(ids, prompt, result, model, token_map, tc, with_token_map)
    os.makedirs(os.path.join(folder, "reference"), exist_ok=True)
    # Outside the model folder's top level, so a checkpoint reader never mistakes it for a shard.
    write_safetensors(os.path.join(folder, "reference", "golden.safetensors"), entries, {"fixture": name})
    meta["golden_tensors"] = {k: {"dtype": v[0], "shape": v[1]} for k, v in entries.items()}
    meta["engram"] = engram_checks(model, tc, token_map, ids, result["snap"]["engram_hash_ids"])
    meta["rope"] = yarn_check(model, tc)
    meta["config_roundtrip"] = config_roundtrip(folder, tc, model)
    meta["checkpoint"] = describe_checkpoint(folder)
    meta["index_source_layers_in_indexer_topk_order"] = list(tc.index_source_layer_ids)
    meta["layer_types"] = list(tc.layer_types)


def bf16_fixture(name, text, ids, prompt, steps, out_dir, args, token_map, deadline):
    meta = {"fixture": name, "storage": "reference (HF) names; BF16, F32 for hc_*, attn_sink, gate.bias, gate.bias_vl"}
    cfg = build_config(text)
    tc = cfg.get_text_config()

    def builder(seed):
        model = make_model(cfg, token_map)
        randomize(model, tc, seed)
        round_to_bf16_storage(model)
        return model, None

    model, _, result = seed_search(name, builder, tc, ids, prompt, steps, args.first_seed, args.max_seeds, deadline, meta)
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    entries = {}
    for pname, t in model.state_dict().items():
        entries[pname] = st_entry(t.float() if F32_STORED.search(pname) else t.to(torch.bfloat16))
    write_safetensors(os.path.join(folder, "model.safetensors"), entries, {"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(nested_config(text, quantized=False), f, indent=2)
    # reload what was written with the reference's loader and require the same logits
    try:
        reloaded, info = M.DeepseekV41ForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
        reloaded.eval()
        token_map.bind(reloaded)
        with torch.no_grad():
            lg, _ = forward(reloaded, reloaded.config, ids)
        meta["reload_max_abs_logit_diff"] = float((lg - result["logits"]).abs().max())
        meta["reload_loading_info"] = {k: sorted(map(str, v)) if isinstance(v, (set, list)) else str(v) for k, v in info.items()}
    except Exception as e:
        meta["reload_error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    finish_fixture(name, folder, model, tc, ids, prompt, result, token_map, meta, with_token_map=True)
    return meta


def hf_to_ds(name):
    if name == "lm_head.weight":
        return "head.weight"
    assert name.startswith("model."), name
    return name[len("model.") :]


DS_FP8 = re.compile(
    r"^layers\.\d+\.(attn\.(wq_a|wq_b|wkv|wo_a|wo_b)|attn\.indexer\.wq_b|ffn\.shared_experts\.w[123]|engram\.wkv)\.weight$"
)
DS_FP4 = re.compile(r"^layers\.\d+\.ffn\.experts\.\d+\.w[123]\.weight$")
DS_ENGRAM_TABLE = re.compile(r"^layers\.\d+\.engram\.embed\.weight$")


def quantize_fp8_rows(w, block=32):
    """Engram table: FP8 e4m3 with one E8M0 scale per (row, 32 columns) -- not tiled."""
    rows, cols = w.shape
    assert cols % block == 0
    wb = w.view(rows, cols // block, block)
    r = wb.abs().amax(-1).double().clamp(min=2.0**-100) / 448.0
    m, e = torch.frexp(r)
    exps = torch.where(m == 0.5, e - 1, e).to(torch.int32)
    q = round_e4m3(wb / pow2(exps.unsqueeze(-1), w.dtype))
    bits = e4m3_bits(q).view(rows, cols)
    assert torch.equal(bits, q.to(torch.float8_e4m3fn).view(torch.uint8).view(rows, cols))
    deq = (q * pow2(exps.unsqueeze(-1), w.dtype)).view(rows, cols)
    return deq, bits, (exps + 127).to(torch.uint8)


def dequant_fp8_rows(bits, scale_bytes, block=32):
    vals = bits.view(torch.float8_e4m3fn).float()
    exps = (scale_bytes.to(torch.int32) - 127).repeat_interleave(block, 1)
    return vals * pow2(exps, vals.dtype)


def fp8_fixture(name, text, ids, prompt, steps, out_dir, args, token_map, deadline):
    meta = {"fixture": name, "storage": "DeepSeek release format: FP8 e4m3 (32x32 E8M0 tiles), FP4 e2m1 experts, FP8 engram table (per-row scales), BF16, F32"}
    cfg = build_config(text)
    tc = cfg.get_text_config()

    def builder(seed):
        model = make_model(cfg, token_map)
        randomize(model, tc, seed)
        round_to_bf16_storage(model)
        params = dict(model.named_parameters())
        ds = {}
        with torch.no_grad():
            for hf, p in params.items():
                dn = hf_to_ds(hf)
                w = p.detach().float()
                if dn.endswith("engram.embed.scale"):
                    continue  # written with its table
                if DS_FP8.match(dn):
                    d, bits, sc = quantize_fp8_block(w, block=32)
                    assert torch.equal(dequant_fp8_bytes(bits, sc, block=32), d)
                    ds[dn] = st_entry(bits, "F8_E4M3")
                    ds[dn[: -len(".weight")] + ".scale"] = st_entry(sc, "F8_E8M0")
                    p.copy_(d)
                elif DS_FP4.match(dn):
                    d, packed, sc = quantize_fp4_rows(w, block=32)
                    assert torch.equal(dequant_fp4_bytes(packed, sc, block=32), d)
                    ds[dn] = st_entry(packed)
                    ds[dn[: -len(".weight")] + ".scale"] = st_entry(sc, "F8_E8M0")
                    p.copy_(d)
                elif DS_ENGRAM_TABLE.match(dn):
                    d, bits, sc = quantize_fp8_rows(w, block=32)
                    assert torch.equal(dequant_fp8_rows(bits, sc, block=32), d)
                    ds[dn] = st_entry(bits, "F8_E4M3")
                    ds[dn[: -len(".weight")] + ".scale"] = st_entry(sc, "F8_E8M0")
                    p.copy_(d)
                    scale_param = params[hf[: -len(".weight")] + ".scale"]
                    scale_param.copy_(pow2(sc.to(torch.int32) - 127, torch.float32))
                elif F32_STORED.search(hf):
                    ds[dn] = st_entry(w)
                else:
                    ds[dn] = st_entry(w.to(torch.bfloat16))
        return model, ds

    model, ds, result = seed_search(name, builder, tc, ids, prompt, steps, args.fp8_first_seed, args.max_seeds, deadline, meta)
    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    # every reference parameter is covered by exactly one stored tensor (scales aside)
    stored = {k for k in ds if not k.endswith(".scale")}
    wanted = {hf_to_ds(k) for k, _ in model.named_parameters() if not k.endswith("engram.embed.scale")}
    meta["name_coverage"] = {"missing": sorted(wanted - stored), "extra": sorted(stored - wanted)}
    shard_of = lambda k: 1 if (k.startswith("embed") or re.match(r"layers\.[0-3]\.", k)) else 2  # noqa: E731
    weight_map, total = {}, 0
    for s in (1, 2):
        fname = f"model-0000{s}-of-00002.safetensors"
        part = {k: v for k, v in ds.items() if shard_of(k) == s}
        total += write_safetensors(os.path.join(folder, fname), part, {"format": "pt"})
        weight_map.update({k: fname for k in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(nested_config(text, quantized=True), f, indent=2)
    finish_fixture(name, folder, model, tc, ids, prompt, result, token_map, meta, with_token_map=False)
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ref-dir", required=True, help="folder with the reference's three deepseek_v41 files")
    ap.add_argument("--tokenizer", default="assets/tokenizer/deepseek_v41_tokenizer.json")
    ap.add_argument("--only", default="tiny_bf16,tiny_fp8")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--fp8-first-seed", type=int, default=101)
    ap.add_argument("--max-seeds", type=int, default=300)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop searching seeds after this many seconds")
    args = ap.parse_args()

    t_start = time.time()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    common = {"versions": versions(), "command": " ".join(sys.argv), "threads": args.threads, "device": "cpu fp32"}
    common["reference"] = install_reference(args.ref_dir)
    common["thresholds"] = {
        "greedy_top1_top2": GREEDY_MARGIN,
        "indexer_rel_boundary_gap": INDEXER_REL_MARGIN,
        "candidate_rel_boundary_gap": CANDIDATE_REL_MARGIN,
        "router_boundary_gap": ROUTER_MARGIN,
        "prefix_vs_full": LEAK_LIMIT,
        "fp64_vs_fp32": FP64_LIMIT,
    }
    print(json.dumps(common, indent=1), flush=True)

    token_map = TokenMap(load_tokenizer(args.tokenizer), TINY_TEXT["engram_pad_id"])
    print(f"compressed vocab {token_map.size} from {len(token_map.lookup)} tokens ({token_map.seconds}s)", flush=True)
    text = complete_text_config(TINY_TEXT, token_map.size)
    common["text_config"] = text

    T, P, G = 48, 16, 32
    g = torch.Generator().manual_seed(12345)
    ids = torch.randint(3, text["vocab_size"], (T,), generator=g)
    prompt = ids[:P].clone()
    failures = []
    for name, fn in (("tiny_bf16", bf16_fixture), ("tiny_fp8", fp8_fixture)):
        if name not in args.only.split(","):
            continue
        t0 = time.time()
        try:
            meta = fn(name, text, ids, prompt, G, args.out, args, token_map, t_start + args.budget_s)
            meta.update(common)
            meta["input_ids_note"] = f"torch.randint(3, {text['vocab_size']}, ({T},), Generator seed 12345); greedy prompt = first {P}, {G} steps"
            meta["seconds"] = round(time.time() - t0, 1)
            with open(os.path.join(args.out, name, "reference", "meta.json"), "w") as f:
                json.dump(meta, f, indent=1, default=str)
            print(f"[{name}] done in {meta['seconds']}s; checks {json.dumps(meta['checks'])[:600]}", flush=True)
        except Exception:
            traceback.print_exc()
            failures.append(name)
    if failures:
        print("FAILED:", failures)
        sys.exit(1)


if __name__ == "__main__":
    main()
