#!/usr/bin/env python3
"""Trains a DSpark drafter for the embedded V4.1 model on the device (issue 15; the recipe of
../shared/docs/dspark.md §5, scaled down) and writes it beside the target in the release format.

    python3 tools/dspark/train_drafter.py --target assets/models/deepinfer-mini-v41 \
        --data scratch/train/packed --ref-dir scratch/ref41 --minutes 6 --out $OUT

1. The public deepseek_v41 reference (--ref-dir, rebuilt from transformers; never committed) is
   built with the target's config plus the drafter's keys, and the target's release-format weights
   (FP8 / FP4 decoded exactly) are loaded into it, frozen.
2. The drafter is drafter_reference.DsparkDrafterV41 (each stage a reference decoder layer; the
   transcription the C++ drafter is tested against), its stage attention and MoE initialised from
   the target's window-only layers, main_proj / Markov / confidence heads fresh.
3. Training is "anchor-bounded sequence packing" (dspark.md §5): per training row, --anchors
   positions inside the answer are drawn; each is one block [anchor, noise x (gamma - 1)] at the
   anchor's positions, whose rows attend to the context rows of the W positions before the anchor
   (the target's taps through main_proj, main_norm and each stage's kv projection) and to their own
   block, bidirectionally: one forward for all blocks of a batch. Losses as DeepSpec's code:
   0.1 CE(z, label) + 0.9 |softmax(z) - softmax(target)|_1 + 1.0 BCE(confidence, 1 - L1/2), each
   position weighted exp(-k / 4), supervision stopping at the first label outside the answer.
4. Export: the drafter's tensors in DeepSeek's names (mtp.*), FP8 32x32 for the stage linears and
   main_proj, FP4 experts, BF16 Markov tables (size: 2 x V x rank), F32 mHC / sinks / router bias /
   confidence head, written as one more shard of a copy of the target's folder, with the config's
   dspark keys. The report (drafter_log.json) holds the loss curve and held-out figures: per-position
   teacher-forced greedy agreement with the target's argmax and the expected acceptance length
   1 + sum_k prod_{i<=k} c*_i of standard speculative sampling at temperature 1.

Confidence calibration (STS) needs verification logs from serving; the temperatures are written as 1.
"""

import argparse
import copy
import json
import math
import os
import re
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(TOOLS, "golden"))
sys.path.insert(0, os.path.join(TOOLS, "train"))

import drafter_reference as DR  # noqa: E402
import make_v41_golden as G  # noqa: E402
from make_v4_golden import (  # noqa: E402
    dequant_fp4_bytes,
    dequant_fp8_bytes,
    read_safetensors_header,
    st_entry,
    write_safetensors,
)
from export import fp4_rows, fp8_block  # noqa: E402  (tools/train/export.py: the target's quantisers)
from train import load_split, pack_rows  # noqa: E402  (tools/train/train.py: the packed data)

MTP_FP8 = re.compile(r"^mtp\.\d+\.(attn\.(wq_a|wq_b|wkv|wo_a|wo_b)|ffn\.shared_experts\.w[123]|main_proj)\.weight$")
MTP_FP4 = re.compile(r"^mtp\.\d+\.ffn\.experts\.\d+\.w[123]\.weight$")
MTP_F32 = re.compile(r"(hc_(attn|ffn)_(fn|base|scale)|attn\.attn_sink|ffn\.gate\.bias|confidence_head\.proj\.weight)$")
MTP_NOT_STORED = re.compile(r"^mtp\.\d+\.ffn\.gate\.bias_vl$")

LOSS_DECAY = 4.0  # DeepSpec's loss_decay_gamma: weight exp(-k / 4), k 0-based
ALPHA_CE, ALPHA_TV, ALPHA_CONF = 0.1, 0.9, 1.0


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# ----------------------------------------------------------------------------------------------
# The target


def read_release_folder(folder):
    """name -> (dtype string, shape, raw bytes tensor) for every tensor of the folder's shards."""
    out = {}
    for fname in sorted(os.listdir(folder)):
        if not fname.endswith(".safetensors"):
            continue
        path = os.path.join(folder, fname)
        header, start = read_safetensors_header(path)
        with open(path, "rb") as f:
            data = f.read()
        for name, info in header.items():
            if name == "__metadata__":
                continue
            a, b = info["data_offsets"]
            raw = torch.frombuffer(bytearray(data[start + a : start + b]), dtype=torch.uint8)
            out[name] = (info["dtype"], info["shape"], raw)
    return out


def decoded(entries, name):
    """The float value of tensor `name` as the engine reads it (FP8 / FP4 through their scales)."""
    dtype, shape, raw = entries[name]
    if dtype == "F32":
        return raw.view(torch.float32).view(shape).clone()
    if dtype == "BF16":
        return raw.view(torch.bfloat16).view(shape).float()
    base = name[: -len(".weight")]
    _, scale_shape, scale_raw = entries[base + ".scale"]
    scale = scale_raw.view(scale_shape)
    if dtype == "F8_E4M3":
        return dequant_fp8_bytes(raw.view(shape), scale, block=32)
    if dtype == "I8":
        return dequant_fp4_bytes(raw.view(torch.int8).view(shape), scale, block=32)
    raise SystemExit(f"FAILED: {name}: unexpected stored dtype {dtype}")


def load_target(folder, text_ref, cfg):
    target = G.M.DeepseekV41ForCausalLM(cfg).float().eval()
    entries = read_release_folder(folder)
    with torch.no_grad():
        for name, p in target.named_parameters():
            dn = G.hf_to_ds(name)
            if dn not in entries:
                if name.endswith("gate.bias_vl"):  # the reference's image-span bias: not a release tensor
                    continue
                raise SystemExit(f"FAILED: the target folder has no {dn} (for {name})")
            value = decoded(entries, dn)
            if tuple(value.shape) != tuple(p.shape):
                raise SystemExit(f"FAILED: {dn} is {tuple(value.shape)}, the reference wants {tuple(p.shape)}")
            p.copy_(value)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


class BatchTaps:
    """The streams entering each tap layer (V4.1), mean over hc, for a batched target forward."""

    def __init__(self, target, layer_ids):
        self.layer_ids = list(layer_ids)
        self.seen = {}
        self.handles = [target.model.layers[L].register_forward_pre_hook(self._hook(L), with_kwargs=True) for L in self.layer_ids]

    def _hook(self, L):
        def hook(module, args, kwargs):
            streams = args[0] if args else kwargs["hidden_streams"]  # [B, S, hc, D]
            self.seen[L] = streams.mean(dim=-2)

        return hook

    def take(self):
        out = torch.cat([self.seen[L] for L in self.layer_ids], dim=-1)
        self.seen = {}
        return out


# ----------------------------------------------------------------------------------------------
# The drafter


def init_from_target(drafter, target, ds):
    """Stage i starts as target window layer i's attention, mHC and norms, and its first experts."""
    with torch.no_grad():
        window_layers = [i for i, r in enumerate(target.config.compress_ratios[: target.config.num_hidden_layers]) if r == 0]
        for i, stage in enumerate(drafter.mtp):
            source = target.model.layers[window_layers[i % len(window_layers)]]
            src = dict(source.named_parameters())
            for name, p in stage.named_parameters():
                if name.startswith(("main_", "norm.", "markov_head", "confidence_head")):
                    continue
                m = re.match(r"ffn\.experts\.(\d+)\.(.*)", name)
                if m:
                    key = f"ffn.experts.{int(m.group(1)) % len(source.ffn.experts)}.{m.group(2)}"
                elif name.startswith("ffn.gate.weight"):
                    p.copy_(src["ffn.gate.weight"][: p.shape[0]])
                    continue
                elif name.startswith("ffn.gate.bias") and not name.endswith("bias_vl"):
                    p.copy_(src[name][: p.shape[0]])
                    continue
                else:
                    key = name
                if key in src and tuple(src[key].shape) == tuple(p.shape):
                    p.copy_(src[key])
        first, last = drafter.mtp[0], drafter.mtp[-1]
        nn.init.normal_(first.main_proj.weight, std=1.0 / math.sqrt(first.main_proj.weight.shape[1]))
        first.main_norm.weight.fill_(1.0)
        last.norm.weight.copy_(target.model.norm.weight)
        nn.init.normal_(last.markov_head.markov_w1.weight, std=1.0)
        last.markov_head.markov_w2.weight.zero_()  # z = U at first
        last.confidence_head.proj.weight.zero_()


def ste_fp8(x):
    """The reference's FP8 window-row rounding in the forward, identity in the backward."""
    return x + (G.M._fake_quant_fp8_block(x.detach(), block_size=32) - x.detach())


def kv_rows(target, attn, x, positions):
    cos, sin = target.model.rotary_emb(x, position_ids=positions, layer_type="main")
    return ste_fp8(G.M.apply_rotary_pos_emb(attn.kv_norm(attn.wkv(x)), cos, sin))


def blocks_attention(target, attn, x, positions, context_kv, mask):
    """drafter_reference.block_attention for every block of a batch: x [B, T, D] (T = blocks x
    gamma rows, already attn_norm'ed) at `positions` [B, T]; keys = context_kv [B, S, hd] then the
    block rows' kv; `mask` [B, 1, T, S + T] additive (0 / -inf): a row sees its anchor's W context
    rows and its own block."""
    B, T, _ = x.shape
    cos, sin = target.model.rotary_emb(x, position_ids=positions, layer_type="main")
    q = attn.wq_b(attn.q_norm(attn.wq_a(x))).view(B, T, attn.num_heads, attn.head_dim)
    q = G.M.apply_rotary_pos_emb(q, cos, sin).transpose(1, 2)  # [B, H, T, hd]
    block_kv = ste_fp8(G.M.apply_rotary_pos_emb(attn.kv_norm(attn.wkv(x)), cos, sin))  # [B, T, hd]
    keys = torch.cat([context_kv, block_kv], dim=1).unsqueeze(1)  # [B, 1, S + T, hd]
    out, _ = G.M.eager_attention_forward(attn, q, keys, keys, mask, scaling=attn.scaling)  # [B, T, H, hd]
    out = G.M.apply_rotary_pos_emb(out, cos, sin, inverse=True)
    grouped = out.reshape(B, T, attn.config.o_groups, -1)
    return attn.wo_b(attn.wo_a(grouped).flatten(2))


def draft_forward(drafter, target, ds, taps, ids, anchors, window):
    """Teacher-forced drafts for every anchor. taps [B, S, m*D]; ids [B, S + 1]; anchors [B, N]
    (positions; -1 = padding). Returns U [B, N, g, V] base logits, h [B, N, g, D], e [B, N, g, r]
    (Markov embedding of each row's previous token: the anchor, then the labels)."""
    B, S, _ = taps.shape
    N, g, hc = anchors.shape[1], ds.block_size, drafter.hc_mult
    device = taps.device
    valid = anchors >= 0
    a = anchors.clamp(min=0)
    first, last = drafter.mtp[0], drafter.mtp[-1]
    main_x = first.main_norm(first.main_proj(taps))  # [B, S, D]
    ctx_positions = torch.arange(S, device=device).expand(B, S)
    k = torch.arange(g, device=device)
    positions = (a.unsqueeze(-1) + k).view(B, N * g)  # [B, T]
    block_ids = torch.full((B, N, g), ds.noise_token_id, dtype=torch.long, device=device)
    block_ids[:, :, 0] = torch.gather(ids, 1, a)
    emb = target.model.embed(block_ids.view(B, N * g))  # [B, T, D]
    streams = emb.unsqueeze(2).expand(-1, -1, hc, -1).contiguous()
    pre = streams.new_zeros(*streams.shape[:-1])
    pre[..., 0] = 1.0
    # Row (n, k) sees context positions [a_n - W, a_n) and block n.
    row_anchor = a.unsqueeze(-1).expand(B, N, g).reshape(B, N * g)
    j = torch.arange(S, device=device)
    ctx_ok = (j.view(1, 1, S) < row_anchor.unsqueeze(-1)) & (j.view(1, 1, S) >= row_anchor.unsqueeze(-1) - window)
    block_of = torch.arange(N, device=device).repeat_interleave(g)
    blk_ok = (block_of.view(N * g, 1) == block_of.view(1, N * g)).expand(B, -1, -1)
    mask = torch.zeros(B, 1, N * g, S + N * g, device=device)
    mask.masked_fill_(~torch.cat([ctx_ok, blk_ok], dim=-1).unsqueeze(1), float("-inf"))
    for layer in drafter.mtp:
        attn = layer.attn
        context_kv = kv_rows(target, attn, main_x, ctx_positions)

        def attention(x, attn=attn, context_kv=context_kv):
            return blocks_attention(target, attn, x, positions, context_kv, mask)

        streams, pre = DR.DsparkDrafterV41.stage_forward(layer, streams, pre, attention)
    h = G.M.DeepseekV41DecoderLayer.hc_collapse(streams, pre)  # [B, T, D]
    # Previous token of row k: the anchor for k = 0, else the label of row k - 1 (ids[a + k]).
    prev_pos = (a.unsqueeze(-1) + k).clamp(max=ids.shape[1] - 1)
    prev = torch.gather(ids, 1, prev_pos.view(B, N * g)).view(B, N, g)
    e = last.markov_head.markov_w1(prev)  # [B, N, g, r]
    return h.view(B, N, g, -1), e, valid


def draw_anchors(rng, mask, n_anchors, gamma):
    """Per row, up to n_anchors sorted positions a with the anchor token and the next one inside the
    answer (mask), -1 padding; labels ids[a + 1 .. a + gamma], supervision while they stay inside."""
    B, L = mask.shape
    out = np.full((B, n_anchors), -1, np.int64)
    for b in range(B):
        ok = np.nonzero(mask[b, :-1].astype(bool) & mask[b, 1:].astype(bool))[0]
        ok = ok[ok < L - 1 - 1]
        if len(ok) == 0:
            continue
        pick = np.sort(rng.choice(ok, size=min(n_anchors, len(ok)), replace=False))
        out[b, : len(pick)] = pick
    return out


def block_losses(drafter, target, h, e, valid, final_hidden, ids, mask, anchors, gamma):
    """Losses and metrics over the supervised rows only (the head's V-wide rows are the memory)."""
    B, N, g, D = h.shape
    device = h.device
    last = drafter.mtp[-1]
    a = anchors.clamp(min=0)
    k = torch.arange(g, device=device)
    label_pos = (a.unsqueeze(-1) + k + 1).clamp(max=ids.shape[1] - 1)  # token a + k + 1
    inside = torch.gather(mask, 1, label_pos.view(B, -1)).view(B, N, g).bool() & (a.unsqueeze(-1) + k + 1 < ids.shape[1])
    supervised = valid.unsqueeze(-1) & (torch.cumprod(inside.int(), dim=-1) > 0)
    weight = torch.exp(-k.float() / LOSS_DECAY).expand(B, N, g)
    sel = supervised
    hs, es, w = h[sel], e[sel], weight[sel]
    labels = torch.gather(ids, 1, label_pos.view(B, -1)).view(B, N, g)[sel]
    # The target's distribution at the label's position: row a + k of the target's final hidden.
    tpos = (a.unsqueeze(-1) + k).clamp(max=final_hidden.shape[1] - 1).view(B, -1)
    t_hidden = torch.gather(final_hidden, 1, tpos.unsqueeze(-1).expand(-1, -1, final_hidden.shape[-1])).view(B, N, g, -1)[sel]
    with torch.no_grad():
        p_t = F.softmax(target.lm_head(t_hidden).float(), dim=-1)
    U = target.lm_head(last.norm(hs))
    z = (U + last.markov_head.markov_w2(es)).float()
    log_q = F.log_softmax(z, dim=-1)
    l1 = (log_q.exp() - p_t).abs().sum(-1)
    c_star = (1.0 - 0.5 * l1).clamp(0.0, 1.0).detach()
    raw = last.confidence_head.proj(torch.cat([hs.to(es.dtype), es], dim=-1))[..., 0].float()
    ce = F.cross_entropy(z, labels, reduction="none")
    bce = F.binary_cross_entropy_with_logits(raw, c_star, reduction="none")
    denom = w.sum().clamp(min=1e-6)
    loss = (ALPHA_CE * (w * ce).sum() + ALPHA_TV * (w * l1).sum() + ALPHA_CONF * (w * bce).sum()) / denom
    with torch.no_grad():
        agree = (z.argmax(-1) == p_t.argmax(-1)).float()
        by_k = {}
        kk = k.expand(B, N, g)[sel]
        for i in range(g):
            m = kk == i
            if bool(m.any()):
                by_k[i] = {"rows": int(m.sum()), "greedy_agree": float(agree[m].mean()), "c_star": float(c_star[m].mean()),
                           "confidence": float(torch.sigmoid(raw[m]).mean())}
        # Expected acceptance length at temperature 1 over anchors with all gamma positions supervised.
        full = supervised.all(-1)
        cs = torch.zeros(B, N, g, device=device)
        cs[sel] = c_star
        tau = 1.0 + torch.cumprod(cs, dim=-1).sum(-1)
        tau_mean = float(tau[full].mean()) if bool(full.any()) else float("nan")
        ag = torch.zeros(B, N, g, device=device)
        ag[sel] = agree
        greedy_len = 1.0 + torch.cumprod(ag, dim=-1).sum(-1)
        greedy_mean = float(greedy_len[full].mean()) if bool(full.any()) else float("nan")
    return loss, {"loss": float(loss.detach()), "ce": float((w * ce).sum() / denom), "l1": float((w * l1).sum() / denom),
                  "bce": float((w * bce).sum() / denom), "tau_sampled_t1": tau_mean, "greedy_accept_len": greedy_mean, "by_position": by_k}


# ----------------------------------------------------------------------------------------------
# Export


def export(drafter, ds, temperatures, target_folder, text_json, out_dir):
    """Copy of the target folder + one shard of mtp.* tensors + the config's drafter keys."""
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(target_folder):
        src = os.path.join(target_folder, f)
        if os.path.isfile(src) and (f.endswith(".safetensors") or f in ("model.safetensors.index.json",)):
            shutil.copyfile(src, os.path.join(out_dir, f))
    entries, counts = {}, {"fp8": 0, "fp4": 0, "bf16": 0, "f32": 0}
    for name, p in drafter.named_parameters():
        if MTP_NOT_STORED.match(name):
            continue
        w = p.detach().float().cpu()
        base = name[: -len(".weight")]
        if MTP_F32.search(name):
            entries[name] = st_entry(w.contiguous())
            counts["f32"] += 1
        elif MTP_FP8.match(name):
            _, bits, sc = fp8_block(w.to(torch.bfloat16).float())
            entries[name] = st_entry(bits, "F8_E4M3")
            entries[base + ".scale"] = st_entry(sc, "F8_E8M0")
            counts["fp8"] += 1
        elif MTP_FP4.match(name):
            _, packed, sc = fp4_rows(w.to(torch.bfloat16).float())
            entries[name] = st_entry(packed)
            entries[base + ".scale"] = st_entry(sc, "F8_E8M0")
            counts["fp4"] += 1
        else:
            entries[name] = st_entry(w.to(torch.bfloat16).contiguous())
            counts["bf16"] += 1
    shard = "model-drafter.safetensors"
    size = write_safetensors(os.path.join(out_dir, shard), entries, {"format": "pt"})
    index_path = os.path.join(out_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
    else:  # a one-file checkpoint: the index names its tensors too
        index = {"metadata": {"total_size": 0}, "weight_map": {}}
        for f in os.listdir(out_dir):
            if f.endswith(".safetensors") and f != shard:
                header, _ = read_safetensors_header(os.path.join(out_dir, f))
                index["weight_map"].update({k: f for k in header if k != "__metadata__"})
    for name in entries:
        index["weight_map"][name] = shard
    index["weight_map"] = dict(sorted(index["weight_map"].items()))
    index["metadata"]["total_size"] = int(index["metadata"].get("total_size", 0)) + size
    with open(index_path, "w") as f:
        json.dump(index, f, indent=1)
    with open(os.path.join(target_folder, "config.json")) as f:
        config = json.load(f)
    config["text_config"] = dict(text_json, dspark_confidence_temperatures=list(temperatures))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return {"tensors": counts, "shard_bytes": size, "shard": shard}


# ----------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="assets/models/deepinfer-mini-v41")
    ap.add_argument("--data", default="scratch/train/packed")
    ap.add_argument("--ref-dir", default="scratch/ref41")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/drafter_out"), help="drafter_log.json goes here")
    ap.add_argument("--export-dir", default=None, help="the model folder with the drafter (default: OUT/<target's name>)")
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--gamma", type=int, default=5)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--taps", default="2,5,7", help="target layer ids whose input streams are tapped")
    ap.add_argument("--noise-id", type=int, default=None, help="default: the tokenizer's <｜place▁holder▁no▁0｜> or V-1")
    ap.add_argument("--seq", type=int, default=640)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--anchors", type=int, default=48)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--splits", default="chat_train", help="packed splits to train on")
    ap.add_argument("--eval-split", default="chat_test")
    ap.add_argument("--smoke", action="store_true",
                    help="random rows instead of --data (a check of the pipeline on any target, e.g. the tiny fixture)")
    a = ap.parse_args()

    t0 = time.time()
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    info = G.install_reference(a.ref_dir)
    DR.set_reference(G.M)
    with open(os.path.join(a.target, "config.json")) as f:
        target_config = json.load(f)
    text = copy.deepcopy(target_config["text_config"])
    n = int(text["num_hidden_layers"])
    noise = a.noise_id
    if noise is None:
        tok = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "assets", "tokenizer", "deepseek_v41_tokenizer.json")))
        noise = next((t["id"] for t in tok.get("added_tokens", []) if t["content"] == "<｜place▁holder▁no▁0｜>"), text["vocab_size"] - 1)
    dspark = {
        "dspark_block_size": a.gamma,
        "dspark_noise_token_id": int(noise),
        "dspark_target_layer_ids": [int(x) for x in a.taps.split(",")],
        "dspark_markov_rank": a.rank,
        "dspark_n_routed_experts": a.experts,
        "dspark_num_experts_per_tok": a.topk,
    }
    text_json = dict(text, num_nextn_predict_layers=a.stages, compress_ratios=list(text["compress_ratios"])[:n] + [0] * a.stages, **dspark)
    text_json.pop("dspark_confidence_temperatures", None)
    text_ref = G.complete_text_config(copy.deepcopy(text_json), 99092)
    text_ref.pop("engram_num_embeddings", None)
    text_ref.pop("engram_compressed_vocab_size", None)
    cfg = G.build_config(text_ref)
    tc = cfg.get_text_config()
    ds = DR.DsparkConfig.from_text_config(dict(text_json, dspark_confidence_temperatures=[1.0] * a.gamma))
    log("reference", info, "dspark", dspark, "device", device)

    target = load_target(a.target, text_ref, cfg).to(device)
    drafter = DR.DsparkDrafterV41(tc, ds).float()
    init_from_target(drafter, target.cpu(), ds)
    target.to(device)
    drafter.to(device).train()
    taps = BatchTaps(target, ds.target_layer_ids)
    window = int(tc.sliding_window)

    if a.smoke:
        def random_split(count, seed):
            g = np.random.default_rng(seed)
            lengths = g.integers(a.seq // 2, a.seq, size=count)
            off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            ids = g.integers(6, int(text["vocab_size"]), size=int(off[-1])).astype(np.int64)
            mask = np.ones(int(off[-1]), np.uint8)
            mask[off[:-1]] = 0
            return ids, mask, off
        splits, evals = [random_split(64, 1)], random_split(16, 2)
    else:
        splits = [load_split(a.data, s) for s in a.splits.split(",")]
        evals = load_split(a.data, a.eval_split)
    params = [p for n_, p in drafter.named_parameters() if not MTP_NOT_STORED.match(n_)]
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), weight_decay=0.0)
    n_params = sum(p.numel() for p in params)
    log(f"drafter parameters {n_params}, target loaded in {time.time() - t0:.1f} s")

    def batch_of(source_splits, size, seed_rng):
        ids, mask = pack_rows(seed_rng, source_splits, a.seq)
        pick = seed_rng.choice(len(ids), size=min(size, len(ids)), replace=False)
        return ids[pick], mask[pick]

    def step_forward(ids_np, mask_np):
        ids = torch.from_numpy(ids_np).to(device)
        mask = torch.from_numpy(mask_np.astype(np.int64)).to(device)
        anchors = torch.from_numpy(draw_anchors(rng, mask_np, a.anchors, a.gamma)).to(device)
        with torch.no_grad():
            final_hidden = target.model(input_ids=ids[:, :-1], use_cache=False).last_hidden_state
            tap_rows = taps.take()
        h, e, valid = draft_forward(drafter, target, ds, tap_rows, ids, anchors, window)
        return block_losses(drafter, target, h, e, valid, final_hidden, ids, mask, anchors, a.gamma)

    eval_rng = np.random.default_rng(12345)
    eval_batches = [batch_of([evals], a.batch, eval_rng) for _ in range(4)]

    def evaluate():
        drafter.eval()
        out = []
        with torch.no_grad():
            for ids_np, mask_np in eval_batches:
                out.append(step_forward(ids_np, mask_np)[1])
        drafter.train()
        keys = ["loss", "ce", "l1", "bce", "tau_sampled_t1", "greedy_accept_len"]
        summary = {k: float(np.nanmean([o[k] for o in out])) for k in keys}
        summary["by_position"] = {
            i: {m: float(np.mean([o["by_position"][i][m] for o in out if i in o["by_position"]])) for m in ("greedy_agree", "c_star", "confidence")}
            for i in range(a.gamma)
        }
        return summary

    report = {"dspark": dspark, "stages": a.stages, "args": vars(a), "params": n_params, "reference": info}
    report["eval_start"] = evaluate()
    log("eval at start", json.dumps(report["eval_start"]))
    curve, step = [], 0
    budget = a.minutes * 60.0
    t_train = time.time()
    total_steps_guess = None
    while time.time() - t_train < budget:
        elapsed = time.time() - t_train
        frac = elapsed / budget
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.5 * (1 + math.cos(math.pi * min(frac, 1.0))) * 0.95 + 0.05)
        for group in opt.param_groups:
            group["lr"] = lr
        ids_np, mask_np = batch_of(splits, a.batch, rng)
        loss, metrics = step_forward(ids_np, mask_np)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % 25 == 0:
            curve.append({"step": step, "seconds": round(time.time() - t_train, 1), "lr": lr,
                          **{k: metrics[k] for k in ("loss", "ce", "l1", "bce", "tau_sampled_t1", "greedy_accept_len")}})
            log(json.dumps(curve[-1]))
    report["steps"] = step
    report["train_seconds"] = time.time() - t_train
    report["curve"] = curve
    report["eval_end"] = evaluate()
    log("eval at end", json.dumps(report["eval_end"]))
    folder = a.export_dir or os.path.join(a.out, os.path.basename(os.path.normpath(a.target)))
    report["export"] = export(drafter.cpu(), ds, [1.0] * a.gamma, a.target, text_json, folder)
    with open(os.path.join(a.out, "drafter_log.json"), "w") as f:
        json.dump(report, f, indent=1)
    log("exported", json.dumps(report["export"]), f"total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
