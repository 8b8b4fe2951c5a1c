#!/usr/bin/env python3
"""Train deepinfer's embedded model (issue 7) on the device: a small DeepSeek-V4.1 (transformers
reference, installed from scratch/ref41) on the data tools/train/prepare.sh packed, then export it
in DeepSeek's release format (export.py) and measure what ships.

One call of the device `run` (10 minutes): --minutes is the TRAINING wall time; install, data load,
evaluation and export add about 1.5 minutes. Outputs under --out ($OUT):
  model.tar.part-*     the model folder (config.json, tokenizer.json, safetensors) as a split tar
  train_log.json       config, data, loss curve, held-out loss / perplexity before and after
                       quantisation, teacher-forced greedy exactness on held-out arithmetic
  ckpt.pt.part-*       bf16 weights + step, rewritten every --ckpt-minutes; removed after a
                       successful export unless --keep-ckpt (the 64 MiB return limit)
Resume (a second call): --resume DIR where DIR holds ckpt.pt.part-* (carried back in scratch/).

Training path: the reference's cache-less forward, with each kv source's compressed entries and
index keys REPLACING the previous group's (the cache-less path concatenates them, which the cached
path and the engine do not; checked against a fresh-cache forward at start, `path_check` in the
log). The FP4/FP8 cache fake-quantisers keep their forward values and pass gradients straight
through (their rounding has zero gradient otherwise). Router biases follow DeepSeek's
auxiliary-loss-free balancing (a fixed step toward equal load). The indexers get no gradient
(top-k); index_topk and the candidate pool cover 1024 tokens, more than the 640-token training window,
so their selection never drops an entry in training and only acts beyond 1024 tokens.
"""

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import time
import traceback

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # tools/
import ref41_install  # noqa: E402
M = C = None


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def install_reference(ref_dir):
    global M, C
    C, M, info = ref41_install.install_reference(ref_dir)
    return info


def text_config(a):
    L = 8
    return {
        "vocab_size": 129280,
        "hidden_size": a.hidden,
        "num_hidden_layers": L,
        "num_attention_heads": a.heads,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "qk_rope_head_dim": 16,
        "q_lora_rank": 64,
        "o_groups": 2,
        "o_lora_rank": 64,
        "sliding_window": 128,
        # window-only 0-1 | ratio-2 group {2 kv+index source, 3 reuse} | ratio-1 group {4 kv+index
        # source + candidate source, 5 reuse, 6 reindex in the candidate pool, 7 reuse}
        # (the schedule of tests/data/configs/tiny_v41.json; layer 4 = L/2 allows window replay)
        "compress_ratios": [0, 0, 2, 2, 1, 1, 1, 1],
        "kv_source_layer_ids": [2, 4],
        "index_source_layer_ids": [2, 4, 6],
        "candidate_source_layer_id": 4,
        "candidate_topk_blocks": 64,
        "candidate_block_size": 16,
        "index_n_heads": 4,
        "index_head_dim": 64,
        "index_topk": 1024,
        "rope_theta": 10000.0,
        "compress_rope_theta": 160000.0,
        "rope_scaling": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32.0, "beta_slow": 1.0},
        "max_position_embeddings": 1048576,
        "n_routed_experts": a.experts,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": a.moe_inter,
        "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc",
        "gate_temp": 1.0,
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "swiglu_limit": 10.0,
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "rms_norm_eps": 1e-20,
        "engram_layer_ids": [],
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


def build_config(text):
    cfg = C.DeepseekV41Config(text_config=dict(text))
    for c in (cfg, cfg.get_text_config()):
        try:
            c._attn_implementation = "eager"
        except Exception as e:  # noqa: BLE001
            log(f"note: setting eager on {type(c).__name__} failed: {e}")
    return cfg


def complete_rope(text):
    """As make_v41_golden.py: if the reference drops YaRN from `rope_scaling`, spell the per-rope-type
    dict out (rope_parameters) so the compressed layers keep YaRN; config.json gets the same dict."""
    compress = build_config(text).get_text_config().rope_parameters["compress"]
    if compress.get("rope_type") == "yarn":
        return text, "rope_scaling"
    t = dict(text)
    partial = t["qk_rope_head_dim"] / t["head_dim"]
    yarn = {k: v for k, v in t["rope_scaling"].items()}
    t["rope_parameters"] = {
        "main": {"rope_type": "default", "rope_theta": t["rope_theta"], "partial_rotary_factor": partial},
        "compress": dict(yarn, rope_theta=t["compress_rope_theta"], partial_rotary_factor=partial, attention_factor=1.0),
    }
    return t, "rope_parameters (reference dropped YaRN from rope_scaling)"


def patch_reference_for_training(model, tc):
    """Straight-through cache fake-quantisers; per-group shared state in the cache-less forward."""
    fp4, fp8 = M._fake_quant_fp4_block, M._fake_quant_fp8_block

    def ste4(x, block_size, e4m3_scales=False):
        return x + (fp4(x.detach(), block_size, e4m3_scales) - x.detach())

    def ste8(x, block_size=32):
        return x + (fp8(x.detach(), block_size) - x.detach())

    M._fake_quant_fp4_block, M._fake_quant_fp8_block = ste4, ste8

    def new_group(module, args, kwargs):
        shared = kwargs.get("shared")
        if shared is not None and kwargs.get("past_key_values") is None:
            for key in ("compress_kv", "index_k", "topk_bias"):
                shared.pop(key, None)
        return None

    for i, layer in enumerate(model.model.layers):
        if i in tc.kv_source_layer_ids:
            layer.attn.register_forward_pre_hook(new_group, with_kwargs=True)


def moe_forward_sorted(self, hidden_states, image_mask=None):
    """The reference's MoE block with one host sync per call instead of two per expert: tokens are
    sorted by expert, each expert runs on its contiguous slice, outputs are added back with
    index_add_. Same sum per token (the order of the two routed terms may differ)."""
    shape = hidden_states.shape
    flat = hidden_states.reshape(-1, shape[-1])
    _, weights, indices = self.gate(hidden_states, image_mask)
    k = indices.shape[-1]
    flat_idx = indices.reshape(-1)
    order = torch.argsort(flat_idx, stable=True)
    counts = torch.bincount(flat_idx, minlength=self.n_experts).tolist()
    token_of = order // k
    xs, ws = flat[token_of], weights.reshape(-1)[order].unsqueeze(-1)
    outs, start = [], 0
    for i, c in enumerate(counts):
        if c:
            outs.append(self.experts[i](xs[start : start + c], ws[start : start + c]).float())
        start += c
    y = torch.zeros_like(flat, dtype=torch.float32)
    y.index_add_(0, token_of, torch.cat(outs))
    y += self.shared_experts(flat).float()
    return y.to(hidden_states.dtype).view(shape)


@torch.no_grad()
def install_sorted_moe(model, device):
    """Swap in moe_forward_sorted if it agrees with the reference's loop on a random input."""
    block = model.model.layers[0].ffn
    x = torch.randn(2, 96, model.config.get_text_config().hidden_size, device=device)
    cls = type(block)
    want = cls.forward(block, x)
    got = moe_forward_sorted(block, x)
    diff = float((want - got).abs().max())
    if diff < 1e-4:
        cls.forward = moe_forward_sorted
    return diff


def fake_quant_fp8(w, block=32):
    """FP8 e4m3 with a power-of-two scale per 32x32 block (export.py's format), on the GPU."""
    o, i = w.shape
    po, pi = -(-o // block) * block, -(-i // block) * block
    b = F.pad(w, (0, pi - i, 0, po - o)).view(po // block, block, pi // block, block)
    scale = torch.exp2(torch.ceil(torch.log2(b.abs().amax(dim=(1, 3), keepdim=True).clamp(min=2.0**-100) / 448.0)))
    q = (b / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float() * scale
    return q.view(po, pi)[:o, :i]


E2M1 = None


def fake_quant_fp4(w, block=32):
    """FP4 e2m1 with a power-of-two scale per 32 columns of a row (export.py's format), on the GPU."""
    global E2M1
    if E2M1 is None or E2M1.device != w.device:
        E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=w.device)
    o, i = w.shape
    b = w.view(o, i // block, block)
    scale = torch.exp2(torch.ceil(torch.log2(b.abs().amax(-1, keepdim=True).clamp(min=2.0**-100) / 6.0)))
    x = (b / scale).clamp(-6.0, 6.0)
    mag = E2M1[(x.abs().unsqueeze(-1) - E2M1).abs().argmin(-1)]
    return (torch.copysign(mag, x) * scale).view(o, i)


def install_qat(model):
    """Quantisation-aware training: the linears export.py stores as FP8 / FP4 see their quantised
    weights in the forward once `flag[0]` is set (straight-through gradient to the float weight)."""
    from export import FP4_EXPERT, FP8_LINEAR

    flag = [False]
    count = 0
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        quant = fake_quant_fp4 if FP4_EXPERT.search(name + ".weight") else fake_quant_fp8 if FP8_LINEAR.search(name + ".weight") else None
        if quant is None:
            continue

        grouped = getattr(mod, "n_groups", None)  # DeepseekV41GroupedLinear (wo_a): per-group bmm
        if type(mod) is not torch.nn.Linear and grouped is None:
            continue

        def forward(x, mod=mod, quant=quant, grouped=grouped):
            w = mod.weight
            if flag[0]:
                w = w + (quant(w.detach().float()).to(w.dtype) - w.detach())
            if grouped is None:
                return F.linear(x, w, mod.bias)
            # the reference's DeepseekV41GroupedLinear.forward with the weight passed in
            shape, hidden = x.shape[:-2], x.shape[-1]
            wg = w.view(grouped, -1, hidden).transpose(1, 2)
            y = torch.bmm(x.reshape(-1, grouped, hidden).transpose(0, 1), wg).transpose(0, 1)
            return y.reshape(*shape, grouped, -1)

        mod.forward = forward
        count += 1
    return flag, count


@torch.no_grad()
def qat_check(model, flag, ids, device):
    """Max |logit diff| of the QAT forward and of the float forward against the exported weights
    (export.quantise_state, which also rounds embed / head / norms to BF16): QAT should be closer."""
    from export import quantise_state

    model.eval()
    x = torch.tensor(ids, device=device).view(1, -1)
    float_logits = model(input_ids=x, use_cache=False).logits.float()
    flag[0] = True
    qat_logits = model(input_ids=x, use_cache=False).logits.float()
    flag[0] = False
    state = {k: v for k, v in model.state_dict().items() if "inv_freq" not in k}
    backup = {k: v.detach().clone() for k, v in state.items()}
    _, shipped, _ = quantise_state(state)
    model.load_state_dict({k: v.to(device) for k, v in shipped.items()}, strict=False)
    shipped_logits = model(input_ids=x, use_cache=False).logits.float()
    model.load_state_dict(backup, strict=False)
    model.train()
    return {"qat_vs_shipped": float((qat_logits - shipped_logits).abs().max()),
            "float_vs_shipped": float((float_logits - shipped_logits).abs().max())}


def fresh_cache(tc):
    from transformers.cache_utils import DynamicCache, DynamicSlidingWindowLayer

    cache = DynamicCache()
    cache.layers = [
        M.DeepseekV41CSACache(tc) if i in tc.kv_source_layer_ids else DynamicSlidingWindowLayer(sliding_window=tc.sliding_window)
        for i in range(tc.num_hidden_layers)
    ]
    return cache


# ----------------------------------------------------------------------------------------------
# Data (prepare.sh): per split ids.u32.gz, mask.u8.gz, offsets.u64 (example starts, plus the end)


def load_split(data_dir, name):
    ids = np.frombuffer(gzip.open(os.path.join(data_dir, f"{name}_ids.u32.gz")).read(), dtype="<u4").astype(np.int64)
    mask = np.frombuffer(gzip.open(os.path.join(data_dir, f"{name}_mask.u8.gz")).read(), dtype=np.uint8)
    off = np.fromfile(os.path.join(data_dir, f"{name}_offsets.u64"), dtype="<u8").astype(np.int64)
    assert len(ids) == len(mask) == off[-1], name
    return ids, mask, off


def pack_rows(rng, splits, seq):
    """Whole examples (longer ones cut) greedily packed into rows of seq+1 tokens; pads (EOS, no loss)."""
    pieces = [(s, i) for s, (_, _, off) in enumerate(splits) for i in range(len(off) - 1)]
    order = rng.permutation(len(pieces))
    rows_ids, rows_mask = [], []
    cur_ids, cur_mask, n = np.full(seq + 1, 1, np.int64), np.zeros(seq + 1, np.uint8), 0
    for k in order:
        s, i = pieces[k]
        ids, mask, off = splits[s]
        a, b = off[i], min(off[i + 1], off[i] + seq + 1)
        length = b - a
        if n + length > seq + 1:
            rows_ids.append(cur_ids)
            rows_mask.append(cur_mask)
            cur_ids, cur_mask, n = np.full(seq + 1, 1, np.int64), np.zeros(seq + 1, np.uint8), 0
        cur_ids[n : n + length] = ids[a:b]
        cur_mask[n : n + length] = mask[a:b]
        n += length
    if n:
        rows_ids.append(cur_ids)
        rows_mask.append(cur_mask)
    return np.stack(rows_ids), np.stack(rows_mask)


def hidden_states(model, ids):
    return model.model(input_ids=ids, use_cache=False).last_hidden_state


def masked_nll(model, ids, mask):
    """Sum of next-token NLL over target positions (mask of the predicted token) and their count."""
    h = hidden_states(model, ids[:, :-1])
    sel = mask[:, 1:].bool()
    logits = model.lm_head(h[sel]).float()
    nll = F.cross_entropy(logits, ids[:, 1:][sel], reduction="sum")
    return nll, int(sel.sum())


@torch.no_grad()
def evaluate(model, split, device, fp32=True, batch=16, greedy_exact=False):
    """Per-example (each from position 0, as served) NLL over target tokens; with greedy_exact, the
    share of examples whose every target token is the argmax (greedy decoding reproduces them)."""
    ids, mask, off = split
    model.eval()
    total, count, exact, n_ex = 0.0, 0, 0, len(off) - 1
    ctx = torch.autocast("cuda", dtype=torch.bfloat16, enabled=not fp32)
    for s in range(0, n_ex, batch):
        ex = [(off[i], min(off[i + 1], off[i] + 1024)) for i in range(s, min(s + batch, n_ex))]
        T = max(b - a for a, b in ex)
        x = np.full((len(ex), T), 1, np.int64)
        m = np.zeros((len(ex), T), np.uint8)
        for r, (a, b) in enumerate(ex):
            x[r, : b - a], m[r, : b - a] = ids[a:b], mask[a:b]
        x, m = torch.from_numpy(x).to(device), torch.from_numpy(m).to(device)
        with ctx:
            h = hidden_states(model, x[:, :-1])
            logits = model.lm_head(h).float()
        nll = F.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none")
        sel = m[:, 1:].bool()
        total += float(nll[sel].sum())
        count += int(sel.sum())
        if greedy_exact:
            ok = (logits.argmax(-1) == x[:, 1:]) | ~sel
            exact += int(ok.all(dim=1).sum())
    out = {"examples": n_ex, "tokens": count, "loss": total / max(count, 1), "perplexity": math.exp(min(total / max(count, 1), 50))}
    if greedy_exact:
        out["greedy_exact"] = exact / max(n_ex, 1)
    model.train()
    return out


@torch.no_grad()
def path_check(model, tc, ids, device):
    """The training forward (cache-less, per-group) against the reference's cached path, fp32."""
    model.eval()
    x = torch.tensor(ids, device=device).view(1, -1)
    a = model(input_ids=x, use_cache=False).logits.float()
    b = model(input_ids=x, past_key_values=fresh_cache(tc), use_cache=True).logits.float()
    model.train()
    return float((a - b).abs().max())


# ----------------------------------------------------------------------------------------------


def save_ckpt(model, step, elapsed, out_dir, extra):
    state = {k: v.detach().to(torch.bfloat16).cpu() for k, v in model.state_dict().items() if v.is_floating_point()}
    tmp = "/tmp/deepinfer_ckpt.pt"
    torch.save({"state": state, "step": step, "elapsed": elapsed, **extra}, tmp)
    for f in os.listdir(out_dir):
        if f.startswith("ckpt.pt.part-"):
            os.remove(os.path.join(out_dir, f))
    split_file(tmp, out_dir, "ckpt.pt.part-")


def split_file(path, out_dir, prefix, part=15 * 1024 * 1024):
    with open(path, "rb") as f:
        k = 0
        while chunk := f.read(part):
            with open(os.path.join(out_dir, f"{prefix}{k:02d}"), "wb") as g:
                g.write(chunk)
            k += 1
    return k


def ds_name_of_big(name):
    """The embedding and head (the two vocabulary-sized tensors), else None."""
    return name if name in ("model.embed.weight", "lm_head.weight") else None


def load_ckpt(resume_dir):
    """ckpt.pt.part-* as save_ckpt wrote them, or ckpt.pt.xz.part-* (the same bytes xz-compressed,
    to fit the device's 64 MiB working-tree limit when carried back)."""
    import lzma

    xz = sorted(f for f in os.listdir(resume_dir) if f.startswith("ckpt.pt.xz.part-"))
    parts = xz or sorted(f for f in os.listdir(resume_dir) if f.startswith("ckpt.pt.part-"))
    data = b"".join(open(os.path.join(resume_dir, p), "rb").read() for p in parts)
    tmp = "/tmp/deepinfer_resume.pt"
    with open(tmp, "wb") as g:
        g.write(lzma.decompress(data) if xz else data)
    return torch.load(tmp, map_location="cpu")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="scratch/train/packed")
    ap.add_argument("--ref-dir", default="scratch/ref41")
    ap.add_argument("--tokenizer", default="assets/tokenizer/deepseek_v41_tokenizer.json")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/train_out"))
    ap.add_argument("--minutes", type=float, default=7.0, help="training wall time")
    ap.add_argument("--ckpt-minutes", type=float, default=2.0)
    ap.add_argument("--resume", default=None, help="folder with ckpt.pt.part-*")
    ap.add_argument("--keep-ckpt", action="store_true")
    ap.add_argument("--keep-ckpt-lite", action="store_true",
                    help="after an export, keep the checkpoint without embed / head (resume with --resume-big-from "
                    "the exported folder, whose BF16 embed / head are the same bits): both fit the 64 MiB return")
    ap.add_argument("--resume-big-from", default=None, help="model folder whose embed / head complete a lite checkpoint")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--moe-inter", type=int, default=384)
    ap.add_argument("--seq", type=int, default=640)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--bias-step", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--schedule-minutes", type=float, default=None,
                    help="the cosine schedule's whole length over all calls (default: resumed time + --minutes)")
    ap.add_argument("--qat-after", type=float, default=None,
                    help="fraction of the schedule after which FP8/FP4 linears train on their quantised weights")
    ap.add_argument("--profile-steps", type=int, default=0, help="profile this many steps after step 20 (log table)")
    ap.add_argument("--max-size-mb", type=float, default=44.0)
    a = ap.parse_args()
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    report = {"args": vars(a), "versions": {"python": sys.version.split()[0], "torch": torch.__version__}}

    def write_report():
        with open(os.path.join(a.out, "train_log.json"), "w") as f:
            json.dump(report, f, indent=1)

    try:
        import transformers

        report["versions"]["transformers"] = transformers.__version__
        report["reference"] = install_reference(a.ref_dir)
        device = "cuda"
        torch.manual_seed(a.seed)
        rng = np.random.default_rng(a.seed)
        text, report["rope_form"] = complete_rope(text_config(a))
        cfg = build_config(text)
        report["rope_compress"] = {k: (v if isinstance(v, (int, float, str)) else str(v))
                                   for k, v in cfg.get_text_config().rope_parameters["compress"].items()}
        tc = cfg.get_text_config()
        model = M.DeepseekV41ForCausalLM(cfg).float()
        patch_reference_for_training(model, tc)
        step0, elapsed0 = 0, 0.0
        if a.resume:
            ck = load_ckpt(a.resume)
            missing = model.load_state_dict({k: v.float() for k, v in ck["state"].items()}, strict=False)
            step0, elapsed0 = ck["step"], ck["elapsed"]
            still = list(missing.missing_keys)
            if a.resume_big_from:
                from safetensors.torch import load_file
                from export import ds_name

                have = {}
                for f in sorted(os.listdir(a.resume_big_from)):
                    if f.endswith(".safetensors"):
                        have.update(load_file(os.path.join(a.resume_big_from, f)))
                extra = {k: have[ds_name(k)].float() for k in still if ds_name(k) in have}
                model.load_state_dict(extra, strict=False)
                still = [k for k in still if k not in extra]
            report["resumed"] = {"step": step0, "elapsed": elapsed0, "missing": still}
            if still:
                raise RuntimeError(f"checkpoint lacks {still[:5]}")
            log(f"resumed at step {step0}")
        model.to(device).train()
        report["moe_sorted_check_max_diff"] = install_sorted_moe(model, device)
        log("sorted MoE dispatch check", report["moe_sorted_check_max_diff"])
        qat_flag, report["qat_linears"] = install_qat(model)
        n_params = sum(p.numel() for p in model.parameters())
        report["params"] = n_params
        report["text_config"] = text
        log(f"model: {n_params / 1e6:.1f}M parameters")

        train_chat, train_code = load_split(a.data, "chat_train"), load_split(a.data, "code_train")
        test = {n: load_split(a.data, n) for n in ("chat_test", "code_test", "heldout_arith")}
        report["data"] = {n: {"tokens": int(s[2][-1]), "examples": len(s[2]) - 1, "target_tokens": int(s[1].sum())}
                          for n, s in [("chat_train", train_chat), ("code_train", train_code)] + list(test.items())}
        log("data", report["data"])
        ex = test["heldout_arith"]
        report["path_check_max_logit_diff"] = path_check(model, tc, ex[0][ex[2][0] : ex[2][1]].tolist(), device)
        log("path check", report["path_check_max_logit_diff"])
        report["qat_check"] = qat_check(model, qat_flag, ex[0][ex[2][0] : ex[2][1]].tolist(), device)
        log("QAT check", report["qat_check"])

        decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n and p.requires_grad]
        other = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n) and p.requires_grad
                 and not n.endswith("gate.bias") and not n.endswith("gate.bias_vl")]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": other, "weight_decay": 0.0}],
                                lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
        gates = [layer.ffn.gate for layer in model.model.layers]
        loads = [torch.zeros(a.experts, device=device) for _ in gates]

        def count_hook(i):
            def hook(module, inputs, output):
                loads[i] += torch.bincount(output[2].flatten(), minlength=a.experts).float()
            return hook

        for i, g in enumerate(gates):
            g.register_forward_hook(count_hook(i))

        budget = a.minutes * 60.0
        curve, step, t_train, last_ckpt = [], step0, time.time(), time.time()
        rows_ids = rows_mask = None
        cursor = 0
        epoch = 0
        while True:
            elapsed = elapsed0 + time.time() - t_train
            if time.time() - t_train >= budget:
                break
            if rows_ids is None or cursor + a.batch > len(rows_ids):
                rows_ids, rows_mask = pack_rows(rng, [train_chat, train_code], a.seq)
                perm = rng.permutation(len(rows_ids))
                rows_ids, rows_mask = rows_ids[perm], rows_mask[perm]
                cursor, epoch = 0, epoch + 1
                log(f"epoch {epoch}: {len(rows_ids)} rows")
            x = torch.from_numpy(rows_ids[cursor : cursor + a.batch]).to(device, non_blocking=True)
            m = torch.from_numpy(rows_mask[cursor : cursor + a.batch]).to(device, non_blocking=True)
            cursor += a.batch
            total_budget = a.schedule_minutes * 60.0 if a.schedule_minutes else elapsed0 + budget
            progress = min(elapsed / total_budget, 1.0)
            if a.qat_after is not None and progress >= a.qat_after and not qat_flag[0]:
                qat_flag[0] = True
                report["qat_from_step"] = step
                log(f"quantisation-aware training from step {step}")
            if a.profile_steps and step - step0 == 20:
                prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
                prof.__enter__()
            if a.profile_steps and step - step0 == 20 + a.profile_steps:
                torch.cuda.synchronize()
                prof.__exit__(None, None, None)
                report["profile"] = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
                log(report["profile"])
            lr = a.lr * min(1.0, (step - step0 + 1) / a.warmup) * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))
            for g in opt.param_groups:
                g["lr"] = lr
            with torch.autocast("cuda", dtype=torch.bfloat16):
                nll, n = masked_nll(model, x, m)
                loss = nll / max(n, 1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            with torch.no_grad():  # auxiliary-loss-free balancing
                for g, ld in zip(gates, loads):
                    g.bias += a.bias_step * torch.sign(ld.mean() - ld)
                    ld.zero_()
            step += 1
            if step % 25 == 0:
                curve.append({"step": step, "seconds": round(elapsed, 1), "loss": round(float(loss), 4), "lr": lr, "grad_norm": round(float(gn), 3)})
                log(curve[-1])
            if time.time() - last_ckpt >= a.ckpt_minutes * 60:
                report["curve"] = curve
                save_ckpt(model, step, elapsed, a.out, {"text_config": text})
                write_report()
                last_ckpt = time.time()
        report["curve"] = curve
        report["steps"] = step
        report["train_seconds"] = round(elapsed0 + time.time() - t_train, 1)
        report["tokens_seen_approx"] = (step - step0) * a.batch * a.seq
        save_ckpt(model, step, report["train_seconds"], a.out, {"text_config": text})
        write_report()

        report["eval_trained_fp32"] = {n: evaluate(model, s, device, greedy_exact=(n == "heldout_arith")) for n, s in test.items()}
        log("eval trained", report["eval_trained_fp32"])
        write_report()
        if a.no_export:
            return

        from export import export_model

        model_dir = "/tmp/deepinfer_model/deepinfer-mini-v41"
        shutil.rmtree("/tmp/deepinfer_model", ignore_errors=True)
        state = {k: v for k, v in model.state_dict().items() if "inv_freq" not in k}
        shipped, summary = export_model(state, text, a.tokenizer, model_dir)
        report["export"] = summary
        log("export", summary)
        model.load_state_dict({k: v.to(device) for k, v in shipped.items()}, strict=False)
        report["eval_shipped_fp32"] = {n: evaluate(model, s, device, greedy_exact=(n == "heldout_arith")) for n, s in test.items()}
        log("eval shipped", report["eval_shipped_fp32"])
        if summary["folder_bytes"] > a.max_size_mb * 1e6:
            report["warning"] = f"model folder {summary['folder_bytes']} bytes exceeds {a.max_size_mb} MB"
        tar_path = "/tmp/deepinfer_model.tar"
        with tarfile.open(tar_path, "w") as tf:
            tf.add(model_dir, arcname="deepinfer-mini-v41")
        report["tar_bytes"] = os.path.getsize(tar_path)
        report["tar_parts"] = split_file(tar_path, a.out, "model.tar.part-")
        if a.keep_ckpt_lite:
            lite = {k: v for k, v in model.state_dict().items() if v.is_floating_point() and ds_name_of_big(k) is None}
            torch.save({"state": {k: v.detach().to(torch.bfloat16).cpu() for k, v in lite.items()}, "step": step,
                        "elapsed": report["train_seconds"], "text_config": text}, "/tmp/deepinfer_ckpt_lite.pt")
        if not a.keep_ckpt:
            for f in os.listdir(a.out):
                if f.startswith("ckpt.pt.part-"):
                    os.remove(os.path.join(a.out, f))
        if a.keep_ckpt_lite:
            split_file("/tmp/deepinfer_ckpt_lite.pt", a.out, "ckpt.pt.part-")
        report["total_seconds"] = round(time.time() - t_start, 1)
    except Exception:  # noqa: BLE001  the log must come back whatever failed
        report["error"] = traceback.format_exc()
        log(report["error"])
        raise
    finally:
        write_report()


if __name__ == "__main__":
    main()
