#!/usr/bin/env python3
"""Writes a synthetic DeepSeek-V4.1-Flash or V4-Flash checkpoint: release widths, few layers, random weights.

    python3 tools/make_synthetic_v41_flash.py --out /tmp/v41flash            # V4.1, 4 layers, ~32 GB
    python3 tools/make_synthetic_v41_flash.py --out /tmp/v41tiny --layers 2 --small   # ~7 MB, for checks
    python3 tools/make_synthetic_v41_flash.py --family v4 --out /tmp/v4flash  # V4, 4 layers, ~16 GB
    python3 tools/make_synthetic_v41_flash.py --family v4 --out /tmp/v4tiny --layers 4 --small   # ~11 MB
    # the CPU comparison model (docs/BENCHMARKS.md, "CPU: deepinfer vs llama.cpp"): hidden 256, 8 layers,
    # 64 experts top-6, full vocabulary, with the DeepSeek tokenizer so llama.cpp's converter takes it
    python3 tools/make_synthetic_v41_flash.py --family v4 --out /tmp/v4cmp --layers 8 --small \
        --ratios 0,4,128,0,4,128,0,4 --experts 64 --vocab 129280 \
        --tokenizer ../shared/deepseek/tokenizer/deepseek_v3_tokenizer.from_npm_lenml_3.7.2.json \
        --tokenizer-config ../shared/deepseek/tokenizer/deepseek_v3_tokenizer_config.from_npm_lenml_3.7.2.json

--family v41 (the default) makes V4.1-Flash; its output is unchanged by the V4 option (same bytes
for the same command and seed). --family v4 makes V4-Flash (below the V4.1 description).

What it writes into --out (DeepSeek's release layout, which deepinfer's loader reads):
  config.json                      tests/data/configs/v41_flash.json (v4: v4_flash.json) with
                                   num_hidden_layers = N and every per-layer schedule made
                                   consistent for N layers (below)
  model-0000K-of-0000M.safetensors shards of about --shard-gb each, written one after the other
  model.safetensors.index.json     weight_map + metadata.total_size
  SYNTHETIC.txt                    how it was made (the command line, the schedule, the seed)

Tensors: exactly the required entries of deepinfer's expected_tensors(config)
(src/io/checkpoint_schema.cpp) for a V4.1 release checkpoint, in the dtype DeepSeek ships (the
first one the schema accepts): dense linears F8_E4M3 with an F8_E8M0 scale per 32x32 tile, routed
experts I8 holding two e2m1 per byte with an F8_E8M0 scale per 32 inputs, the compressor and index-key
projections, router, embedding and head BF16, mHC parameters, sinks and router bias F32. Optional
entries (gate.bias_vl, MTP layers) are left out.

Schedule for N layers (the release has 40: ratios 0,0 then eighteen 2s then twenty 1s; kv sources
2, 8, 14, 20; index sources also 24, 28, 32, 36; candidate source 20; Engram at 1 and 14; 3 DSpark
layers): layer i takes the compress ratio of release layer floor(i * 40 / N) (N = 4: release layers
0, 10, 20, 30 -> ratios 0, 2, 1, 1), unless --ratios gives them. A ratio > 0 layer is a kv source
(and so an index source) when it maps to a release kv source or when no earlier layer is a kv
source of its ratio; it is an index source when it maps to a release index source; the rest reuse.
The candidate source is the last kv source (the release's rule: candidate 20 = its last kv
source). No Engram layers (so the loader needs no tokenizer), no hash-routed MoE layers (V4.1 has
none), num_nextn_predict_layers 0 and no DSpark fields, unless --drafter: then the release's DSpark
drafter is kept (3 stages mtp.0-2 of ratio 0, 128 routed experts top-3 each, main_proj over 3
taps, Markov head of rank 256, confidence head), tapping the last three layers (N = 4: 1, 2, 3),
8 GB more at release widths; random weights, so it drafts nothing the target keeps, but its cost
is the release drafter's (`bench/decode_step_bench --speculation-profile`).

--family v4 (V4-Flash, tests/data/configs/v4_flash.json: hidden 4096, 64 heads x 512, 256 routed
experts top-6 of width 2048 + 1 shared, vocab 129280; flat config, expert_dtype at the top level):
tensors are the required entries of expected_tensors(config) for a V4 release checkpoint: dense
linears (attention, indexer wq_b, shared experts) F8_E4M3 with an F8_E8M0 scale per 128x128 tile,
routed experts I8 (two e2m1 per byte) with an F8_E8M0 scale per 32 inputs, compressor, indexer
compressor and weights_proj, router, embedding and head BF16, mHC parameters (per layer and the
global hc_head_fn / hc_head_base / hc_head_scale), compressor ape, sinks and router bias F32, and
gate.tid2eid I64 [vocab, top-k] on hash-routed layers (6 distinct experts per token id, random).
Optional entries (MTP layer mtp.0) are left out. Schedule for N layers (the release has 43:
ratios 0,0 then 4,128 alternating from layer 2 to 41 and 4 at 42; layers 0-2 hash-routed): layer i
takes the compress ratio of release layer floor(i * 43 / N) unless --ratios gives them (V4 ratios:
0, 4 = CSA with the lightning indexer, another >= 2 = HCA), and is hash-routed when that release
layer is (layer 0 always is, and hash layers stay a prefix, so num_hash_layers = their count).
N = 4: release layers 0, 10, 21, 32 -> layer 0 SWA + hash-routed, 1 CSA (ratio 4), 2 HCA (128),
3 CSA; N = 2: 0 (SWA + hash), 21 (HCA); N = 3: 0, 14, 28 -> SWA + hash, CSA, CSA. Every N >= 4
has both ratios 4 and 128; every N has one hash layer (N >= 15 more; with --ratios the hash layers
still follow this mapping). num_nextn_predict_layers 0 and no DSpark fields; the 4-layer
full-width V4 checkpoint is 16.4 GB (15.3 GiB), the V4.1 one 32.2 GB (30.0 GiB).

Width options (any family; each replaces one field after --small, so without them the output is
byte-identical to what the tool wrote before they existed): --hidden (hidden_size), --experts
(n_routed_experts), --experts-per-tok (num_experts_per_tok), --vocab (vocab_size; with a tokenizer
it must cover the tokenizer's ids). --dtype release (the default) writes the release dtypes above;
--dtype bf16 writes every linear, the routed experts included, as BF16 (one weight, no scale) and
drops quantization_config (and expert_dtype), which is how deepinfer reads an unquantized
checkpoint; the values are fresh U(-1, 1) * 2/sqrt(cols), not the release codes dequantized.
--tokenizer FILE copies a tokenizer.json into the folder (and --tokenizer-config FILE a
tokenizer_config.json), which converters such as llama.cpp's convert_hf_to_gguf.py need; the
DeepSeek-V3 tokenizer in ../shared/deepseek/tokenizer has ids up to 128814, inside V4's 129280.
llama.cpp's DeepseekV4 converter (upstream 571d0d540) takes --dtype release only: it repacks the
routed experts from FP4 + scales into MXFP4 (BF16 experts are an error) and writes FP8 linears as
Q8_0, BF16 ones as BF16, whatever --outtype says.

Values are random but sane (both families): FP8 codes are U(-1, 1) rounded to e4m3 (never the NaN
codes 0x7f / 0xff) with tile scales 2^(-round(log2 sqrt(cols)) + {-1, 0, 0, +1}), so weights ~
1/sqrt(cols); FP4 bytes are uniform (every e2m1 nibble is finite) with group scales one power of two
below that (e2m1 values have RMS ~2.9); BF16 matrices U(-1, 1) * 2/sqrt(cols) (embedding U(-1, 1));
norms 1 + 0.1 U; mHC base, compressor ape and router bias 0.1 U, mHC scale 0.5 + 0.1 U, sinks 0.5 U.
For speed one random block per kind (--block-mb) is made once and tensors are slices of it at
random offsets, so nothing larger than one block is ever held in memory; shards stream to disk.
Needs numpy only (safetensors is written by hand: 8-byte header length, JSON header, data).
"""

import argparse
import copy
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
BASE_CONFIGS = {
    "v41": REPO / "tests" / "data" / "configs" / "v41_flash.json",
    "v4": REPO / "tests" / "data" / "configs" / "v4_flash.json",
}
MODEL_TYPES = {"v41": ("deepseek_v41",), "v4": ("deepseek_v4",)}
FAMILY_NAMES = {"v41": "DeepSeek-V4.1-Flash", "v4": "DeepSeek-V4-Flash"}

# --small: the same structure with narrow widths, for checking the tool and the loader quickly.
SMALL_WIDTHS = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "head_dim": 128,
    "qk_rope_head_dim": 64,
    "q_lora_rank": 128,
    "o_groups": 4,
    "o_lora_rank": 64,
    "n_routed_experts": 16,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 128,
    "index_n_heads": 4,
    "index_head_dim": 64,
}

DSPARK_KEYS = ("dspark_block_size", "dspark_noise_token_id", "dspark_target_layer_ids", "dspark_markov_rank",
               "dspark_n_routed_experts", "dspark_num_experts_per_tok")
ENGRAM_KEYS = ("engram_num_embeddings", "engram_max_ngram_size", "engram_vocab_size", "engram_n_heads",
               "engram_head_dim", "engram_pad_token_id", "engram_pad_id", "engram_compressed_vocab_size")


def ceil_div(a, b):
    return (a + b - 1) // b


def text_of(config):
    """The text parameters: nested under text_config in V4.1, the top level in V4."""
    return config.get("text_config", config)


# ---------------------------------------------------------------------------------------------
# config


def derive_schedule(text, layers, ratios_override):
    """Per-layer compress ratios, kv sources, index sources and candidate source for `layers` layers."""
    release_layers = text["num_hidden_layers"]
    release_ratios = text["compress_ratios"][:release_layers]
    release_kv = set(text.get("kv_source_layer_ids", []))
    release_index = set(text.get("index_source_layer_ids", []))
    if ratios_override is not None:
        if len(ratios_override) != layers:
            sys.exit(f"--ratios has {len(ratios_override)} entries, --layers is {layers}")
        ratios = list(ratios_override)
        source_of = [None] * layers
    else:
        source_of = [i * release_layers // layers for i in range(layers)]
        ratios = [release_ratios[s] for s in source_of]
    for r in ratios:
        if r not in (0, 1, 2):
            sys.exit(f"compress ratio {r}: V4.1 ratios are 0, 1 or 2")
    kv, index = [], []
    for i, r in enumerate(ratios):
        if r == 0:
            continue
        latest_kv = kv[-1] if kv else None
        if latest_kv is None or ratios[latest_kv] != r or source_of[i] in release_kv:
            kv.append(i)
            index.append(i)
        elif source_of[i] in release_index:
            index.append(i)
    candidate = kv[-1] if kv else -1
    return ratios, kv, index, candidate, source_of


def derive_schedule_v4(text, layers, ratios_override):
    """Per-layer compress ratios and the number of hash-routed layers for a V4 model of `layers` layers."""
    release_layers = text["num_hidden_layers"]
    release_ratios = text["compress_ratios"][:release_layers]
    source_of = [i * release_layers // layers for i in range(layers)]
    if ratios_override is not None:
        if len(ratios_override) != layers:
            sys.exit(f"--ratios has {len(ratios_override)} entries, --layers is {layers}")
        ratios = list(ratios_override)
    else:
        ratios = [release_ratios[s] for s in source_of]
    for r in ratios:
        if r == 1 or r < 0:
            sys.exit(f"compress ratio {r}: V4 ratios are 0, 4 (CSA) or another ratio >= 2 (HCA)")
    # source_of ascends, so the hash-routed layers (release layers < num_hash_layers) are a prefix.
    hash_layers = sum(1 for s in source_of if s < text.get("num_hash_layers", 0))
    return ratios, hash_layers, source_of


def apply_widths(text, widths):
    """--hidden / --experts / --experts-per-tok / --expert-width / --vocab, applied after --small (None: unchanged)."""
    for key, value in widths.items():
        if value is not None:
            text[key] = value


def make_config_v4(base, layers, ratios_override, small, widths=None):
    config = copy.deepcopy(base)
    ratios, hash_layers, source_of = derive_schedule_v4(config, layers, ratios_override)
    config["num_hidden_layers"] = layers
    config["num_nextn_predict_layers"] = 0
    config["compress_ratios"] = ratios
    config["num_hash_layers"] = hash_layers
    for key in DSPARK_KEYS:
        config.pop(key, None)
    if small:
        config.update(SMALL_WIDTHS)
    apply_widths(config, widths or {})
    return config, (source_of if ratios_override is None else [None] * layers)


def make_config(base, layers, ratios_override, small, family="v41", widths=None, drafter=False):
    if family == "v4":
        return make_config_v4(base, layers, ratios_override, small, widths)
    config = copy.deepcopy(base)
    text = config["text_config"]
    ratios, kv, index, candidate, source_of = derive_schedule(text, layers, ratios_override)
    text["num_hidden_layers"] = layers
    text["compress_ratios"] = ratios
    text["kv_source_layer_ids"] = kv
    text["index_source_layer_ids"] = index
    text["candidate_source_layer_id"] = candidate
    text["engram_layer_ids"] = []
    for key in ENGRAM_KEYS:
        text.pop(key, None)
    if drafter:
        # The release's DSpark drafter (its stages ratio 0, its own expert count), tapping the last
        # three layers as the release taps 37-39 of 40.
        stages = text["num_nextn_predict_layers"]
        text["compress_ratios"] = ratios + [0] * stages
        text["dspark_target_layer_ids"] = [max(layers - 3 + i, 0) for i in range(3)]
    else:
        text["num_nextn_predict_layers"] = 0
        for key in DSPARK_KEYS:
            text.pop(key, None)
    config.pop("vision_config", None)  # text only: no vision weights are written
    if small:
        text.update(SMALL_WIDTHS)
        config.pop("image_token_id", None)  # 129264 is outside the small vocabulary
    apply_widths(text, widths or {})
    if "image_token_id" in config and config["image_token_id"] >= text["vocab_size"]:
        config.pop("image_token_id")
    if drafter and text["dspark_noise_token_id"] >= text["vocab_size"]:
        text["dspark_noise_token_id"] = text["vocab_size"] - 1  # a narrower vocabulary (--small, --vocab)
    return config, source_of


def unquantize_config(config):
    """--dtype bf16: no quantization_config and no expert_dtype, so every linear is read as BF16."""
    config.pop("quantization_config", None)
    config.pop("expert_dtype", None)
    text_of(config).pop("expert_dtype", None)
    return config


# ---------------------------------------------------------------------------------------------
# the tensors of expected_tensors(config), required entries only, release dtypes


class Tensor:
    __slots__ = ("name", "dtype", "shape", "kind", "cols")

    def __init__(self, name, dtype, shape, kind, cols=None):
        self.name = name
        self.dtype = dtype  # safetensors dtype string
        self.shape = shape  # stored shape
        self.kind = kind    # how its values are made (see Writer.values)
        self.cols = cols    # logical input width of a matrix (for its spread)

    @property
    def nbytes(self):
        n = {"I64": 8, "F32": 4, "BF16": 2, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1}[self.dtype]
        for d in self.shape:
            n *= d
        return n


def expected_tensors(config, dtype="release"):
    t = text_of(config)
    q = config.get("quantization_config")
    v4 = config["model_type"] == "deepseek_v4"
    bf16_linears = dtype == "bf16"
    if bf16_linears:
        if q is not None:
            sys.exit("--dtype bf16 needs a config without quantization_config")
        block_rows = block_cols = None
    else:
        block_rows, block_cols = q["weight_block_size"]
        expert_dtype = config.get("expert_dtype") if v4 else q.get("expert_dtype")
        if q.get("quant_method") != "fp8" or expert_dtype != "fp4":
            sys.exit("the base config must be a release config (fp8 dense, fp4 experts)")
    D = t["hidden_size"]
    V = t["vocab_size"]
    n = t["hc_mult"]
    L = t["num_hidden_layers"]
    ratios = t["compress_ratios"]
    stages = t.get("num_nextn_predict_layers", 0) if "dspark_block_size" in t else 0
    kv = set(t.get("kv_source_layer_ids", []))
    index = set(t.get("index_source_layer_ids", []))
    hash_layers = t.get("num_hash_layers", 0) if v4 else 0
    out = []

    def add(name, dtype, shape, kind, cols=None):
        out.append(Tensor(name, dtype, list(shape), kind, cols))

    def fp8_linear(prefix, rows, cols):
        if bf16_linears:
            return add(prefix + ".weight", "BF16", [rows, cols], "bf16", cols)
        add(prefix + ".weight", "F8_E4M3", [rows, cols], "fp8", cols)
        add(prefix + ".scale", "F8_E8M0", [ceil_div(rows, block_rows), ceil_div(cols, block_cols)], "fp8_scale", cols)

    def fp4_linear(prefix, rows, cols):
        if bf16_linears:
            return add(prefix + ".weight", "BF16", [rows, cols], "bf16", cols)
        add(prefix + ".weight", "I8", [rows, cols // 2], "fp4", cols)
        add(prefix + ".scale", "F8_E8M0", [rows, cols // 32], "fp4_scale", cols)

    def bf16_matrix(name, rows, cols):
        add(name, "BF16", [rows, cols], "bf16", cols)

    add("embed.weight", "BF16", [V, D], "embed")
    if not t.get("tie_word_embeddings", config.get("tie_word_embeddings", False)):
        bf16_matrix("head.weight", V, D)
    add("norm.weight", "BF16", [D], "norm")
    if v4:  # V4's head collapses the streams with its own mHC parameters (V4.1 has none)
        add("hc_head_fn", "F32", [n, n * D], "f32_matrix", n * D)
        add("hc_head_base", "F32", [n], "small_0.1")
        add("hc_head_scale", "F32", [1], "hc_scale")
    heads_width = t["num_attention_heads"] * t["head_dim"]
    groups_width = t["o_groups"] * t["o_lora_rank"]
    hd = t["head_dim"]
    idx = t["index_head_dim"]
    experts = t["n_routed_experts"]
    inter = t["moe_intermediate_size"]
    mix = (2 + n) * n
    for layer in range(L + stages):
        p = f"layers.{layer}." if layer < L else f"mtp.{layer - L}."
        layer_experts = experts if layer < L else t["dspark_n_routed_experts"]
        add(p + "attn_norm.weight", "BF16", [D], "norm")
        add(p + "ffn_norm.weight", "BF16", [D], "norm")
        for site in ("attn", "ffn"):
            add(p + f"hc_{site}_fn", "F32", [mix, n * D], "f32_matrix", n * D)
            add(p + f"hc_{site}_base", "F32", [mix], "small_0.1")
            add(p + f"hc_{site}_scale", "F32", [3], "hc_scale")
        a = p + "attn."
        fp8_linear(a + "wq_a", t["q_lora_rank"], D)
        add(a + "q_norm.weight", "BF16", [t["q_lora_rank"]], "norm")
        fp8_linear(a + "wq_b", heads_width, t["q_lora_rank"])
        fp8_linear(a + "wkv", hd, D)  # num_key_value_heads is 1
        add(a + "kv_norm.weight", "BF16", [hd], "norm")
        fp8_linear(a + "wo_a", groups_width, heads_width // t["o_groups"])
        fp8_linear(a + "wo_b", D, groups_width)
        add(a + "attn_sink", "F32", [t["num_attention_heads"]], "sink")
        if v4 and ratios[layer] > 0:
            # V4 compressed branch (checkpoint_schema.cpp v4_compressed_branch): ratio 4 (CSA)
            # overlaps two windows (c = 2) and has the lightning indexer with its own compressor.
            ratio = ratios[layer]
            c = 2 if ratio == 4 else 1
            bf16_matrix(a + "compressor.wkv.weight", c * hd, D)
            bf16_matrix(a + "compressor.wgate.weight", c * hd, D)
            add(a + "compressor.ape", "F32", [ratio, c * hd], "small_0.1")
            add(a + "compressor.norm.weight", "BF16", [hd], "norm")
            if ratio == 4:
                fp8_linear(a + "indexer.wq_b", t["index_n_heads"] * idx, t["q_lora_rank"])
                bf16_matrix(a + "indexer.weights_proj.weight", t["index_n_heads"], D)
                bf16_matrix(a + "indexer.compressor.wkv.weight", c * idx, D)
                bf16_matrix(a + "indexer.compressor.wgate.weight", c * idx, D)
                add(a + "indexer.compressor.ape", "F32", [ratio, c * idx], "small_0.1")
                add(a + "indexer.compressor.norm.weight", "BF16", [idx], "norm")
        # V4.1 compressed branch (checkpoint_schema.cpp v41_compressed_branch); the projections of
        # unstated storage ship as BF16, the first dtype the schema accepts.
        if layer in kv:
            bf16_matrix(a + "compressor.wkv.weight", hd, D)
            if ratios[layer] > 1:
                bf16_matrix(a + "compressor.wgate.weight", hd, D)
            add(a + "compressor.norm.weight", "BF16", [hd], "norm")
            bf16_matrix(a + "indexer.wk.weight", idx, hd)
            add(a + "indexer.k_norm.weight", "BF16", [idx], "norm")
        if layer in index:
            fp8_linear(a + "indexer.wq_b", t["index_n_heads"] * idx, t["q_lora_rank"])
            bf16_matrix(a + "indexer.weights_proj.weight", t["index_n_heads"], D)
        f = p + "ffn."
        bf16_matrix(f + "gate.weight", layer_experts, D)
        if layer < hash_layers:
            # Hash routing: top-k expert ids per vocabulary entry (I64, as DeepSeek ships it).
            add(f + "gate.tid2eid", "I64", [V, t["num_experts_per_tok"]], "tid2eid", experts)
        else:
            add(f + "gate.bias", "F32", [layer_experts], "small_0.1")
        for e in range(layer_experts):
            ex = f + f"experts.{e}."
            fp4_linear(ex + "w1", inter, D)
            fp4_linear(ex + "w2", D, inter)
            fp4_linear(ex + "w3", inter, D)
        shared = t["n_shared_experts"] * inter
        if shared > 0:
            fp8_linear(f + "shared_experts.w1", shared, D)
            fp8_linear(f + "shared_experts.w2", D, shared)
            fp8_linear(f + "shared_experts.w3", shared, D)
        if layer >= L:  # the drafter's own tensors (checkpoint_schema.cpp dspark_extras)
            rank = t["dspark_markov_rank"]
            if layer == L:
                fp8_linear(p + "main_proj", D, len(t["dspark_target_layer_ids"]) * D)
                add(p + "main_norm.weight", "BF16", [D], "norm")
            if layer == L + stages - 1:
                add(p + "norm.weight", "BF16", [D], "norm")
                bf16_matrix(p + "markov_head.markov_w1.weight", V, rank)
                bf16_matrix(p + "markov_head.markov_w2.weight", V, rank)
                bf16_matrix(p + "confidence_head.proj.weight", 1, D + rank)
    return out


# ---------------------------------------------------------------------------------------------
# values


def e4m3_positive_table():
    """Values of the e4m3fn codes 0x00 .. 0x7e (0x7f is NaN), ascending with the code."""
    values = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        values.append((m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(values, dtype=np.float64)


class Blocks:
    """One random block per kind of data, made once; tensors are slices of them."""

    def __init__(self, block_bytes, seed):
        self.size = block_bytes
        self.rng = np.random.default_rng(seed)
        self.pick = random.Random(seed)
        # FP8: U(-1, 1) rounded to the nearest e4m3 code of magnitude <= 1 (codes 0x00..0x38).
        table = e4m3_positive_table()[:0x39]
        middles = ((table[1:] + table[:-1]) / 2).astype(np.float32)
        magnitude = self.rng.random(block_bytes, dtype=np.float32)
        codes = np.searchsorted(middles, magnitude).astype(np.uint8)
        del magnitude
        codes |= (self.rng.integers(0, 2, block_bytes, dtype=np.uint8) << 7)
        self.fp8 = codes
        # FP4: any byte is two finite e2m1 values.
        self.fp4 = self.rng.integers(0, 256, block_bytes, dtype=np.uint8)
        # Scale jitter in {-1, 0, 0, +1}, added to a tensor's base exponent.
        self.jitter = np.array([-1, 0, 0, 1], dtype=np.int16)[self.rng.integers(0, 4, block_bytes // 16)]
        self.scale_blocks = {}
        self.bf16_blocks = {}

    def scales(self, exponent):
        block = self.scale_blocks.get(exponent)
        if block is None:
            block = (exponent + self.jitter).astype(np.uint8)
            self.scale_blocks[exponent] = block
        return block

    def bf16(self, spread):
        """uint16 BF16 bit patterns of U(-1, 1) * spread (truncated from f32)."""
        block = self.bf16_blocks.get(spread)
        if block is None:
            values = (self.rng.random(self.size // 2, dtype=np.float32) * 2 - 1) * np.float32(spread)
            block = (values.view(np.uint32) >> 16).astype(np.uint16)
            self.bf16_blocks[spread] = block
        return block

    def chunks(self, block, count):
        """Memoryviews over `block` (a 1-D array) covering `count` elements: one slice at a random
        offset when it fits, else the block repeated from a random start."""
        total = block.shape[0]
        if count <= total:
            start = self.pick.randrange(0, total - count + 1)
            yield memoryview(block[start:start + count])
            return
        start = self.pick.randrange(0, total)
        done = 0
        while done < count:
            take = min(count - done, total - start)
            yield memoryview(block[start:start + take])
            done += take
            start = 0


def scale_exponent(cols):
    """ue8m0 byte of 2^(-round(log2 sqrt(cols)))."""
    return 127 - int(round(math.log2(math.sqrt(cols))))


def bf16_bytes(values):
    values = np.asarray(values, dtype=np.float32)
    return (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()


def tensor_data(tensor, blocks, rng):
    """Yields the tensor's bytes as a few large buffers."""
    count = 1
    for d in tensor.shape:
        count *= d
    kind = tensor.kind
    if kind == "fp8":
        yield from blocks.chunks(blocks.fp8, count)
    elif kind == "fp4":
        yield from blocks.chunks(blocks.fp4, count)
    elif kind == "fp8_scale":
        yield from blocks.chunks(blocks.scales(scale_exponent(tensor.cols)), count)
    elif kind == "fp4_scale":
        # e2m1 codes have RMS ~2.9, so one power of two lower than the FP8 tiles.
        yield from blocks.chunks(blocks.scales(scale_exponent(tensor.cols) - 1), count)
    elif kind == "embed":
        yield from blocks.chunks(blocks.bf16(1.0), count)
    elif kind == "bf16":
        yield from blocks.chunks(blocks.bf16(2.0 / math.sqrt(tensor.cols)), count)
    elif kind == "norm":
        yield bf16_bytes(1 + 0.1 * (rng.random(count, dtype=np.float32) * 2 - 1))
    elif kind == "f32_matrix":
        yield ((rng.random(count, dtype=np.float32) * 2 - 1) * np.float32(2.0 / math.sqrt(tensor.cols))).tobytes()
    elif kind == "small_0.1":
        yield (0.1 * (rng.random(count, dtype=np.float32) * 2 - 1)).astype(np.float32).tobytes()
    elif kind == "hc_scale":
        yield (0.5 + 0.1 * (rng.random(count, dtype=np.float32) * 2 - 1)).astype(np.float32).tobytes()
    elif kind == "sink":
        yield (0.5 * (rng.random(count, dtype=np.float32) * 2 - 1)).astype(np.float32).tobytes()
    elif kind == "tid2eid":
        # Each row: k distinct expert ids of `cols` experts, uniformly at random (a few MB at most).
        rows, k = tensor.shape
        for start in range(0, rows, 4096):
            n = min(4096, rows - start)
            order = np.argsort(rng.random((n, tensor.cols), dtype=np.float32), axis=1)
            yield order[:, :k].astype(np.int64).tobytes()
    else:
        raise ValueError(f"{tensor.name}: no values for kind {kind}")


# ---------------------------------------------------------------------------------------------
# shards


def plan_shards(tensors, shard_bytes):
    shards, current, size = [], [], 0
    for tensor in tensors:
        if current and size + tensor.nbytes > shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(tensor)
        size += tensor.nbytes
    if current:
        shards.append(current)
    return shards


DTYPE_ORDER = {"I64": -1, "F32": 0, "BF16": 1, "F8_E4M3": 2, "I8": 2, "F8_E8M0": 3}


def write_all(f, piece):
    """Writes every byte of `piece` to the unbuffered file `f` (raw writes may be partial)."""
    view = memoryview(piece).cast("B")
    total = len(view)
    while view:
        view = view[f.write(view):]
    return total


def write_shard(path, tensors, blocks, rng):
    # Wider dtypes first, so every tensor's data is aligned for its dtype (as the reference writer does).
    ordered = sorted(tensors, key=lambda t: DTYPE_ORDER[t.dtype])
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for tensor in ordered:
        header[tensor.name] = {"dtype": tensor.dtype, "shape": tensor.shape, "data_offsets": [offset, offset + tensor.nbytes]}
        offset += tensor.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb", buffering=0) as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for tensor in ordered:
            written = 0
            for piece in tensor_data(tensor, blocks, rng):
                written += write_all(f, piece)
            if written != tensor.nbytes:
                raise RuntimeError(f"{tensor.name}: wrote {written} bytes, expected {tensor.nbytes}")
    return offset


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="checkpoint folder to write (created; must be empty or absent)")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    parser.add_argument("--family", choices=("v41", "v4"), default="v41",
                        help="v41: DeepSeek-V4.1-Flash (default); v4: DeepSeek-V4-Flash")
    parser.add_argument("--ratios", help="comma-separated compress ratios per layer (v41: 0, 1, 2; v4: 0, 4, or "
                                         "another >= 2), instead of the ones sampled from the release schedule")
    parser.add_argument("--small", action="store_true", help="narrow widths and 16 experts (quick checks)")
    parser.add_argument("--hidden", type=int, help="hidden_size (after --small; default: unchanged)")
    parser.add_argument("--experts", type=int, help="n_routed_experts (after --small; default: unchanged)")
    parser.add_argument("--experts-per-tok", type=int, help="num_experts_per_tok (after --small; default: unchanged)")
    parser.add_argument("--expert-width", type=int,
                        help="moe_intermediate_size, routed and shared experts (after --small; default: unchanged)")
    parser.add_argument("--vocab", type=int, help="vocab_size (after --small; default: unchanged)")
    parser.add_argument("--dtype", choices=("release", "bf16"), default="release",
                        help="release: FP8 dense + FP4 experts as DeepSeek ships (default); bf16: every linear BF16, "
                             "no quantization_config")
    parser.add_argument("--drafter", action="store_true",
                        help="v41: keep the release's DSpark drafter (3 stages, mtp.0-2, 128 experts top-3, Markov "
                             "rank 256), tapping the last three layers")
    parser.add_argument("--tokenizer", help="a tokenizer.json to copy into --out (for converters that need one)")
    parser.add_argument("--tokenizer-config", help="a tokenizer_config.json to copy into --out")
    parser.add_argument("--base-config", help="release config.json (default: tests/data/configs/v41_flash.json, "
                                              "v4_flash.json with --family v4)")
    parser.add_argument("--shard-gb", type=float, default=4.0, help="target shard size in GB (default 4)")
    parser.add_argument("--block-mb", type=int, default=64, help="size of each random block (default 64 MB)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty --out")
    parser.add_argument("--dry-run", action="store_true", help="print the schedule and sizes, write nothing")
    args = parser.parse_args()

    if args.layers < 1:
        sys.exit("--layers must be >= 1")
    out = Path(args.out)
    if not args.dry_run:
        if out.exists() and any(out.iterdir()) and not args.force:
            sys.exit(f"{out} is not empty (use --force to overwrite)")
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("model*.safetensors*"):
            old.unlink()

    base = json.loads(Path(args.base_config or BASE_CONFIGS[args.family]).read_text())
    if base.get("model_type") not in MODEL_TYPES[args.family]:
        sys.exit(f"--base-config has model_type {base.get('model_type')!r}, not a --family {args.family} config")
    ratios = [int(r) for r in args.ratios.split(",")] if args.ratios else None
    widths = {"hidden_size": args.hidden, "n_routed_experts": args.experts,
              "num_experts_per_tok": args.experts_per_tok, "moe_intermediate_size": args.expert_width,
              "vocab_size": args.vocab}
    for key, value in widths.items():
        if value is not None and value < 1:
            sys.exit(f"{key} must be >= 1")
    if args.drafter and (args.family != "v41" or args.layers < 3):
        sys.exit("--drafter needs --family v41 and at least 3 layers")
    config, source_of = make_config(base, args.layers, ratios, args.small, args.family, widths, args.drafter)
    text = text_of(config)
    if args.dtype == "release" and (text["hidden_size"] % 32 or text["moe_intermediate_size"] % 32):
        sys.exit("FP4 experts need hidden_size and moe_intermediate_size divisible by 32 (or --dtype bf16)")
    if text["num_experts_per_tok"] > text["n_routed_experts"]:
        sys.exit(f"num_experts_per_tok {text['num_experts_per_tok']} > n_routed_experts {text['n_routed_experts']}")
    if args.dtype == "bf16":
        unquantize_config(config)
    tokenizer_files = {}
    for option, source, target in (("--tokenizer", args.tokenizer, "tokenizer.json"),
                                   ("--tokenizer-config", args.tokenizer_config, "tokenizer_config.json")):
        if source is not None:
            if not Path(source).is_file():
                sys.exit(f"{option} {source}: no such file")
            tokenizer_files[target] = Path(source)
    if "tokenizer.json" in tokenizer_files:
        vocab = json.loads(tokenizer_files["tokenizer.json"].read_text(encoding="utf-8"))
        ids = list(vocab.get("model", {}).get("vocab", {}).values()) + [a["id"] for a in vocab.get("added_tokens", [])]
        if ids and max(ids) >= text["vocab_size"]:
            sys.exit(f"--tokenizer has ids up to {max(ids)}, outside vocab_size {text['vocab_size']} (see --vocab)")
    tensors = expected_tensors(config, args.dtype)
    total = sum(t.nbytes for t in tensors)
    shards = plan_shards(tensors, int(args.shard_gb * 1e9))
    kinds = []
    for layer, ratio in enumerate(text["compress_ratios"]):
        if args.family == "v4":
            kind = "SWA" if ratio == 0 else f"CSA r{ratio}" if ratio == 4 else f"HCA r{ratio}"
            kinds.append(kind + (", hash-routed" if layer < text["num_hash_layers"] else ""))
        elif layer >= args.layers:
            kinds.append(f"DSpark stage {layer - args.layers}")
        elif ratio == 0:
            kinds.append("SWA")
        elif layer in text["kv_source_layer_ids"]:
            kinds.append(f"r{ratio} kv source")
        elif layer in text["index_source_layer_ids"]:
            kinds.append(f"r{ratio} reindex")
        else:
            kinds.append(f"r{ratio} reuse")
    schedule = "; ".join(
        f"layer {i}: {k}" + (f" (release layer {source_of[i]})" if i < len(source_of) and source_of[i] is not None else "")
        for i, k in enumerate(kinds))
    if args.family == "v4":
        print(f"{out}: {FAMILY_NAMES['v4']}-shaped, {args.layers} layers ({schedule})")
    else:
        print(f"{out}: {args.layers} layers ({schedule}); candidate source {text['candidate_source_layer_id']}")
    print(f"{len(tensors)} tensors, {total / 1e9:.2f} GB ({total / 2**30:.2f} GiB) in {len(shards)} shard(s)", flush=True)
    by_kind = {}
    for t in tensors:
        part = ("routed experts" if ".experts." in t.name else "embed + head" if t.name in ("embed.weight", "head.weight")
                else "rest (attention, shared experts, router, mHC, norms)")
        if t.name.endswith("gate.tid2eid"):
            part = "hash-routing tables (tid2eid)"
        by_kind[part] = by_kind.get(part, 0) + t.nbytes
    for part, size in by_kind.items():
        print(f"  {part}: {size / 1e9:.2f} GB")
    if args.dry_run:
        return

    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for target, source in tokenizer_files.items():
        (out / target).write_bytes(source.read_bytes())
    started = time.time()
    blocks = Blocks(args.block_mb * 1024 * 1024, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    weight_map = {}
    written = 0
    for k, shard in enumerate(shards):
        name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        written += write_shard(out / name, shard, blocks, rng)
        for tensor in shard:
            weight_map[tensor.name] = name
        elapsed = time.time() - started
        print(f"  {name}: {sum(t.nbytes for t in shard) / 1e9:.2f} GB; {written / 1e9:.2f} GB in {elapsed:.1f} s "
              f"({written / 1e9 / max(elapsed, 1e-9):.2f} GB/s)", flush=True)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (out / "SYNTHETIC.txt").write_text(
        f"Synthetic {FAMILY_NAMES[args.family]}-shaped checkpoint: random weights, no trained behaviour.\n"
        f"made by: {' '.join(sys.argv)}\nseed: {args.seed}\nschedule: {schedule}\n"
        f"total tensor bytes: {total}\n")
    on_disk = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(f"total: {total / 1e9:.2f} GB of tensors ({total / 2**30:.2f} GiB), {on_disk / 1e9:.2f} GB on disk, "
          f"{time.time() - started:.1f} s")


if __name__ == "__main__":
    main()
