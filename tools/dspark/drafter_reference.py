"""PyTorch transcription of the DSpark drafter of docs/MODELS.md ("## DSpark drafter"), V4.1 family.

No runnable public reference of the drafter exists (transformers' `deepseek_v41` drops `mtp.*` on
load), so this module builds one from the public reference's own pieces: each stage IS a
`DeepseekV41DecoderLayer` (built for layer index num_hidden_layers + i, ratio 0, with the drafter's
expert count), whose mHC (`hc_mixes` / `hc_collapse` / `hc_expand`), norms and MoE are called as
they are; only the attention is computed here, because the drafter's attention (context rows from
the target's taps, then the whole block, bidirectional) is not the reference layer's attention.

The step numbers in the comments are the spec's (1 taps, 2 context, 3 block, 4 stages, 5 head,
6 Markov loop, 7 confidence).

Call `set_reference(modeling_module)` once (the installed `modeling_deepseek_v41`) before building
a drafter. All compute follows the module's dtype (the goldens use fp32 on CPU; an fp64 copy is used
to measure rounding sensitivity).
"""

import copy
import dataclasses
import math

import torch
import torch.nn as nn

M = None  # the reference modeling module (transformers.models.deepseek_v41.modeling_deepseek_v41)


def set_reference(modeling_module):
    global M
    M = modeling_module


def _need_reference():
    if M is None:
        raise RuntimeError("drafter_reference.set_reference(modeling_module) was not called")


@dataclasses.dataclass
class DsparkConfig:
    block_size: int  # gamma
    noise_token_id: int
    target_layer_ids: list  # m ids
    markov_rank: int  # r
    n_routed_experts: int
    num_experts_per_tok: int
    num_stages: int  # S = num_nextn_predict_layers
    confidence_temperatures: list  # T_1..T_gamma

    @classmethod
    def from_text_config(cls, text):
        """From the `text_config` dict of config.json (the deepinfer-only temperatures included)."""
        gamma = int(text["dspark_block_size"])
        temps = [float(t) for t in text.get("dspark_confidence_temperatures", [1.0] * gamma)]
        cfg = cls(
            block_size=gamma,
            noise_token_id=int(text["dspark_noise_token_id"]),
            target_layer_ids=[int(i) for i in text["dspark_target_layer_ids"]],
            markov_rank=int(text["dspark_markov_rank"]),
            n_routed_experts=int(text.get("dspark_n_routed_experts", text["n_routed_experts"])),
            num_experts_per_tok=int(text.get("dspark_num_experts_per_tok", text["num_experts_per_tok"])),
            num_stages=int(text["num_nextn_predict_layers"]),
            confidence_temperatures=temps,
        )
        n = int(text["num_hidden_layers"])
        problems = []
        if gamma < 1:
            problems.append(f"dspark_block_size {gamma} < 1")
        if len(temps) != gamma or any(t <= 0 for t in temps):
            problems.append(f"dspark_confidence_temperatures {temps}: need {gamma} positive entries")
        if cfg.num_stages < 1:
            problems.append("num_nextn_predict_layers must be >= 1 for a drafter")
        ids = cfg.target_layer_ids
        if not ids or any(i < 0 or i >= n for i in ids) or sorted(set(ids)) != ids:
            problems.append(f"dspark_target_layer_ids {ids}: need strictly increasing ids in [0, {n})")
        if not 0 <= cfg.noise_token_id < int(text["vocab_size"]):
            problems.append(f"dspark_noise_token_id {cfg.noise_token_id} outside the vocabulary")
        if problems:
            raise ValueError("bad DSpark config: " + "; ".join(problems))
        return cfg


# ----------------------------------------------------------------------------------------------
# Step 1: taps


class TapRecorder:
    """Records, during a target forward, the residual streams ENTERING each target layer id (V4.1:
    the transformers config's "attention input"; for id 0 the embedding), averaged over the hc
    streams. Forward pre-hooks see exactly what the layer receives (engram would be applied inside
    the layer, after this point; the fixtures have none)."""

    def __init__(self, target, layer_ids):
        self.layer_ids = list(layer_ids)
        self.active = False
        self.seen = {}
        self.handles = [
            target.model.layers[L].register_forward_pre_hook(self._hook(L), with_kwargs=True)
            for L in sorted(set(self.layer_ids))
        ]

    def _hook(self, L):
        def hook(module, args, kwargs):
            if self.active:
                streams = args[0] if args else kwargs["hidden_streams"]  # [B, S, hc, D]
                if streams.shape[0] != 1:
                    raise RuntimeError("TapRecorder expects batch 1")
                self.seen[L] = streams[0].mean(dim=-2)  # [S, D]

        return hook

    def start(self):
        self.seen = {}
        self.active = True

    def stop(self):
        """The taps of the forward since start(): [S, m * D], concatenated in id order."""
        self.active = False
        missing = [L for L in self.layer_ids if L not in self.seen]
        if missing:
            raise RuntimeError(f"no streams recorded for tap layers {missing}")
        return torch.cat([self.seen[L] for L in self.layer_ids], dim=-1)

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


# ----------------------------------------------------------------------------------------------
# Drafter state and output


@dataclasses.dataclass
class DraftContext:
    """Per-stage window of context rows (step 2): FP8-fake-quantised, RoPE'd kv rows, the last W
    committed positions. `length` = committed positions injected so far = the next anchor's position."""

    rows: list  # per stage: [n, head_dim]
    positions: torch.Tensor  # [n] absolute positions of the rows (shared by all stages)
    length: int = 0


@dataclasses.dataclass
class DraftBlock:
    position: int  # p, the anchor's position
    anchor: int
    base_logits: torch.Tensor  # U [gamma, V]
    draft_logits: torch.Tensor  # z [gamma, V]
    tokens: list  # x_1..x_gamma
    confidence_raw: torch.Tensor  # proj . [h_k ; e_k]  [gamma]
    confidence: torch.Tensor  # sigmoid(raw / T_k)  [gamma]
    feature: torch.Tensor  # h [gamma, D], the collapsed rows (confidence feature)
    stage_streams: torch.Tensor  # [S, gamma, hc, D] each stage's output streams
    context_rows: torch.Tensor  # [S, n, head_dim] the context rows the block attended to
    context_positions: torch.Tensor  # [n]


def greedy_pick(row):
    """argmax, ties to the lowest id (explicit, not left to torch.argmax's documentation)."""
    if not bool(torch.isfinite(row).all()):
        raise FloatingPointError("non-finite logits in a draft row")
    return int(torch.nonzero(row == row.max()).flatten().min())


# ----------------------------------------------------------------------------------------------
# The drafter


class DsparkDrafterV41(nn.Module):
    """The S stages with the extra tensors attached where the checkpoint has them, so that
    `named_parameters()` yields DeepSeek's release names directly: `mtp.{i}.<decoder layer tensor>`,
    `mtp.0.main_proj.weight`, `mtp.0.main_norm.weight`, `mtp.{S-1}.norm.weight`,
    `mtp.{S-1}.markov_head.markov_w1.weight` [V, r], `mtp.{S-1}.markov_head.markov_w2.weight` [V, r],
    `mtp.{S-1}.confidence_head.proj.weight` [1, D + r]. (Every stage layer also owns an unused
    `ffn.gate.bias_vl`, the reference router's image-span bias.)

    The target model is never a submodule: the drafter borrows its embedding, LM head and RoPE
    tables per call, so the drafter's parameters are exactly the `mtp.*` tensors."""

    def __init__(self, tc, ds):
        super().__init__()
        _need_reference()
        self.ds = ds
        D, V, r, m = tc.hidden_size, tc.vocab_size, ds.markov_rank, len(ds.target_layer_ids)
        self.hidden_size, self.hc_mult, self.window = D, tc.hc_mult, tc.sliding_window
        # The stages' MoE differs from the target's only in its expert count and top-k.
        stage_tc = copy.deepcopy(tc)
        stage_tc.n_routed_experts = ds.n_routed_experts
        stage_tc.num_experts_per_tok = ds.num_experts_per_tok
        n = tc.num_hidden_layers
        ratios = list(stage_tc.compress_ratios)
        if len(ratios) < n + ds.num_stages or any(ratios[n + i] != 0 for i in range(ds.num_stages)):
            raise ValueError(f"compress_ratios {ratios}: the {ds.num_stages} draft layers need trailing ratio-0 entries")
        self.mtp = nn.ModuleList([M.DeepseekV41DecoderLayer(stage_tc, n + i) for i in range(ds.num_stages)])
        for i, layer in enumerate(self.mtp):
            a = layer.attn
            # Guards against a reference change making a stage something else than a plain
            # ratio-0 window layer with the drafter's experts.
            assert a.compress_ratio == 0 and a.compressor is None and a.indexer is None, f"stage {i} is not ratio 0"
            assert a.rope_layer_type == "main" and layer.engram is None, f"stage {i}: unexpected rope/engram"
            assert len(layer.ffn.experts) == ds.n_routed_experts, f"stage {i}: {len(layer.ffn.experts)} experts"
            assert layer.ffn.gate.top_k == ds.num_experts_per_tok, f"stage {i}: top-k {layer.ffn.gate.top_k}"
        first, last = self.mtp[0], self.mtp[-1]
        first.main_proj = nn.Linear(m * D, D, bias=False)
        first.main_norm = M.DeepseekV41RMSNorm(D, eps=tc.rms_norm_eps)
        last.norm = M.DeepseekV41RMSNorm(D, eps=tc.rms_norm_eps)
        last.markov_head = nn.Module()
        last.markov_head.markov_w1 = nn.Embedding(V, r)  # weight [V, r]: a table indexed by token
        last.markov_head.markov_w2 = nn.Linear(r, V, bias=False)  # weight [V, r]: r -> V
        last.confidence_head = nn.Module()
        last.confidence_head.proj = nn.Linear(D + r, 1, bias=False)  # weight [1, D + r]

    # -- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def main_rope(target, x, positions):
        """cos/sin of the ratio-0 ("main") RoPE at `positions`, from the target's rotary module
        (rope_theta, no YaRN): the same tables the target's window layers use."""
        return target.model.rotary_emb(x, position_ids=positions.view(1, -1), layer_type="main")

    def kv_rows(self, target, attn, x, positions):
        """`fp8q(RoPE(kv_norm(wkv(x))))` for x [1, n, D]: how the reference writes a window row."""
        cos, sin = self.main_rope(target, x, positions)
        kv = M.apply_rotary_pos_emb(attn.kv_norm(attn.wkv(x)), cos, sin)
        return M._fake_quant_fp8_block(kv, block_size=32)  # [1, n, head_dim]

    def block_attention(self, target, attn, x, positions, context_rows):
        """Step 4's attention for the block x [1, gamma, D] (already attn_norm'ed) at `positions`:
        queries and block kv from x, keys = context rows then all block rows, no mask, the
        reference's eager softmax with sinks (scale head_dim^-0.5), inverse RoPE at the query
        positions, grouped wo_a then wo_b."""
        B, g, _ = x.shape
        cos, sin = self.main_rope(target, x, positions)
        q = attn.wq_b(attn.q_norm(attn.wq_a(x))).view(B, g, attn.num_heads, attn.head_dim)
        q = M.apply_rotary_pos_emb(q, cos, sin).transpose(1, 2)  # [1, H, g, hd]
        block_kv = self.kv_rows(target, attn, x, positions)  # [1, g, hd]
        keys = torch.cat([context_rows.to(block_kv.dtype).unsqueeze(0), block_kv], dim=1).unsqueeze(1)  # [1, 1, n+g, hd]
        out, _ = M.eager_attention_forward(attn, q, keys, keys, None, scaling=attn.scaling)  # [1, g, H, hd]
        out = M.apply_rotary_pos_emb(out, cos, sin, inverse=True)
        grouped = out.reshape(B, g, attn.config.o_groups, -1)
        return attn.wo_b(attn.wo_a(grouped).flatten(2))

    @staticmethod
    def stage_forward(layer, streams, pre, attention):
        """DeepseekV41DecoderLayer.forward with the attention call replaced by `attention(x)`
        (same order of operations; no engram: stages have none). Returns (streams, ffn pre)."""
        residual = streams
        attn_pre, attn_post, attn_comb = layer.hc_mixes(streams, layer.hc_attn_fn, layer.hc_attn_scale, layer.hc_attn_base)
        collapsed = layer.hc_collapse(streams, pre)
        streams = layer.hc_expand(attention(layer.attn_norm(collapsed)), residual, attn_post, attn_comb)
        residual = streams
        ffn_pre, ffn_post, ffn_comb = layer.hc_mixes(streams, layer.hc_ffn_fn, layer.hc_ffn_scale, layer.hc_ffn_base)
        collapsed = layer.hc_collapse(streams, attn_pre)
        streams = layer.hc_expand(layer.ffn(layer.ffn_norm(collapsed)), residual, ffn_post, ffn_comb)
        return streams, ffn_pre

    # -- step 2: context -------------------------------------------------------------------------

    def new_context(self):
        hd = self.mtp[0].attn.head_dim
        dtype = self.mtp[0].attn.wkv.weight.dtype
        return DraftContext(
            rows=[torch.zeros(0, hd, dtype=dtype) for _ in self.mtp],
            positions=torch.zeros(0, dtype=torch.long),
            length=0,
        )

    def inject(self, target, ctx, taps):
        """Adds the committed positions ctx.length .. ctx.length + n - 1 from their taps [n, m*D]:
        main_x = RMSNorm(main_proj(taps), main_norm); each stage stores fp8q(RoPE(kv_norm(wkv(main_x))))
        and keeps the last W = sliding_window rows."""
        n = taps.shape[0]
        positions = torch.arange(ctx.length, ctx.length + n, dtype=torch.long)
        first = self.mtp[0]
        main_x = first.main_norm(first.main_proj(taps.to(first.main_proj.weight.dtype))).unsqueeze(0)  # [1, n, D]
        for i, layer in enumerate(self.mtp):
            rows = self.kv_rows(target, layer.attn, main_x, positions)[0]
            ctx.rows[i] = torch.cat([ctx.rows[i], rows])[-self.window :]
        ctx.positions = torch.cat([ctx.positions, positions])[-self.window :]
        ctx.length += n
        return main_x[0]

    # -- steps 3-7: one draft block --------------------------------------------------------------

    def draft(self, target, ctx, anchor):
        ds, g, hc = self.ds, self.ds.block_size, self.hc_mult
        p = ctx.length
        # Context rows at positions [p - W, p) that exist; the window holds exactly those when
        # every committed position was injected in order.
        keep = ctx.positions >= p - self.window
        positions_ctx = ctx.positions[keep]
        if positions_ctx.numel() and not torch.equal(positions_ctx, torch.arange(p - positions_ctx.numel(), p)):
            raise RuntimeError(f"context positions {positions_ctx.tolist()} are not the {positions_ctx.numel()} before {p}")
        rows_ctx = [r[keep] for r in ctx.rows]

        # step 3: [a, noise x (gamma - 1)] at p .. p + gamma - 1, target embedding, copied to every stream
        ids = torch.tensor([int(anchor)] + [ds.noise_token_id] * (g - 1), dtype=torch.long)
        positions = torch.arange(p, p + g, dtype=torch.long)
        emb = target.model.embed(ids.view(1, -1))  # [1, g, D]
        streams = emb.unsqueeze(2).expand(-1, -1, hc, -1).contiguous()  # [1, g, hc, D]
        # The first site collapses stream 0 (one-hot pre), as the target's first layer does.
        pre = streams.new_zeros(*streams.shape[:-1], dtype=torch.float32)
        pre[..., 0] = 1.0

        # step 4: stages in order, the pre carried from each site to the next across stages
        per_stage = []
        for layer, rows in zip(self.mtp, rows_ctx):
            attn = layer.attn

            def attention(x, attn=attn, rows=rows):
                return self.block_attention(target, attn, x, positions, rows)

            streams, pre = self.stage_forward(layer, streams, pre, attention)
            per_stage.append(streams[0])

        # step 5: collapse with the last FFN site's pre; h is the confidence feature
        last = self.mtp[-1]
        h = M.DeepseekV41DecoderLayer.hc_collapse(streams, pre)[0]  # [g, D]
        U = target.lm_head(last.norm(h))  # [g, V]

        # steps 6-7: the Markov loop (greedy) and the confidences
        w1 = last.markov_head.markov_w1.weight
        z_rows, tokens, raw = [], [], []
        prev = int(anchor)
        for k in range(g):
            e = w1[prev]  # [r]
            z = U[k] + last.markov_head.markov_w2(e)
            x = greedy_pick(z)
            raw.append(last.confidence_head.proj(torch.cat([h[k].to(e.dtype), e]))[0])
            z_rows.append(z)
            tokens.append(x)
            prev = x
        raw = torch.stack(raw)
        temps = torch.tensor(ds.confidence_temperatures, dtype=raw.dtype)
        return DraftBlock(
            position=p,
            anchor=int(anchor),
            base_logits=U,
            draft_logits=torch.stack(z_rows),
            tokens=tokens,
            confidence_raw=raw,
            confidence=torch.sigmoid(raw / temps),
            feature=h,
            stage_streams=torch.stack(per_stage),
            context_rows=torch.stack(rows_ctx),
            context_positions=positions_ctx,
        )


# ----------------------------------------------------------------------------------------------
# Self-checks of the transcription against the reference's own modules (need no drafter weights
# beyond a target): the attention of a ratio-0 target layer recomputed query by query with this
# module's block attention, and a ratio-0 target decoder layer recomputed with stage_forward.


def _ratio0_layer(target):
    for i, layer in enumerate(target.model.layers):
        if layer.attn.compress_ratio == 0 and layer.engram is None:
            return i, layer
    raise RuntimeError("the target has no ratio-0 layer without engram to check against")


def _causal_mask(S, dtype):
    return torch.full((S, S), float("-inf"), dtype=dtype).triu(1).view(1, 1, S, S)


def check_attention_transcription(drafter, target, seq=6, seed=7):
    """Reference attention (causal, S <= window, no cache) vs block_attention with gamma = 1 and
    the previous rows as context: must agree to fp32 rounding."""
    _need_reference()
    idx, layer = _ratio0_layer(target)
    if seq > target.config.sliding_window:
        raise ValueError("seq must fit the window (the reference mask would cut it)")
    g = torch.Generator().manual_seed(seed)
    dtype = layer.attn.wkv.weight.dtype
    x = torch.randn(1, seq, drafter.hidden_size, generator=g).to(dtype)
    pos = torch.arange(seq, dtype=torch.long)
    rot = target.model.rotary_emb
    pe = {t: rot(x, position_ids=pos.view(1, -1), layer_type=t) for t in ("main", "compress")}
    with torch.no_grad():
        ref, _ = layer.attn(x, position_embeddings=pe, attention_mask=_causal_mask(seq, dtype), past_key_values=None, shared={}, position_ids=pos.view(1, -1))
        rows = drafter.kv_rows(target, layer.attn, x, pos)[0]
        mine = torch.cat([drafter.block_attention(target, layer.attn, x[:, t : t + 1], pos[t : t + 1], rows[:t]) for t in range(seq)], dim=1)
    return {"target_layer": idx, "rows": seq, "max_abs_diff": float((ref - mine).abs().max()), "max_abs_value": float(ref.abs().max())}


def check_layer_transcription(drafter, target, seq=5, seed=8):
    """DeepseekV41DecoderLayer.forward vs stage_forward with the reference attention plugged in."""
    _need_reference()
    idx, layer = _ratio0_layer(target)
    g = torch.Generator().manual_seed(seed)
    dtype = layer.attn.wkv.weight.dtype
    D, hc = drafter.hidden_size, drafter.hc_mult
    streams = torch.randn(1, seq, hc, D, generator=g).to(dtype)
    pre = torch.rand(1, seq, hc, generator=g) + 0.1
    pos = torch.arange(seq, dtype=torch.long).view(1, -1)
    rot = target.model.rotary_emb
    pe = {t: rot(streams, position_ids=pos, layer_type=t) for t in ("main", "compress")}
    mask = _causal_mask(seq, dtype)
    with torch.no_grad():
        ref_streams, ref_pre = layer(streams, pre, None, None, {}, position_embeddings=pe, position_ids=pos, attention_mask=mask, past_key_values=None)

        def attention(x):
            return layer.attn(x, position_embeddings=pe, attention_mask=mask, past_key_values=None, shared={}, position_ids=pos)[0]

        my_streams, my_pre = DsparkDrafterV41.stage_forward(layer, streams, pre, attention)
    return {
        "target_layer": idx,
        "streams_max_abs_diff": float((ref_streams - my_streams).abs().max()),
        "pre_max_abs_diff": float((ref_pre - my_pre).abs().max()),
    }


def top2_gap(row):
    v = torch.topk(row.double(), 2).values
    return float(v[0] - v[1])


def router_gap(module, hidden, output):
    """Gap at the router's top-k boundary of the selection scores (score_fn(logits / temp) + bias),
    recomputed; also checks the recomputed picks are the router's. Works whether the router returns
    (weights, indices) or (logits, weights, indices)."""
    indices = output[-1]
    flat = hidden.reshape(-1, hidden.shape[-1]).float()
    scores = module.score_fn(torch.nn.functional.linear(flat, module.weight.float()) / module.gate_temp)
    sel = scores + module.bias.float()
    k = module.top_k
    mine = torch.topk(sel, k, dim=-1).indices.sort(dim=-1).values
    theirs = indices.reshape(-1, k).sort(dim=-1).values
    if not torch.equal(mine, theirs):
        raise RuntimeError("recomputed router picks differ from the router's")
    if sel.shape[-1] <= k:
        return math.inf
    vals = sel.sort(dim=-1, descending=True).values
    return float((vals[:, k - 1] - vals[:, k]).min())


class RouterGaps:
    """Smallest router top-k gap over every call of the given gates while active."""

    def __init__(self, gates):
        self.active = False
        self.min_gap = math.inf
        self.errors = []

        def hook(module, args, output):  # a closure, not a bound method: deep copies stay cheap
            if not self.active:
                return
            try:
                self.min_gap = min(self.min_gap, router_gap(module, args[0], output))
            except Exception as e:  # a margin we cannot measure is reported, not fatal
                self.errors.append(f"{type(e).__name__}: {e}")

        self.handles = [gate.register_forward_hook(hook) for gate in gates]

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
