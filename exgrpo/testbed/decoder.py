"""The hand-written incremental decoder `exgrpo.testbed.rollout.generate` samples with (`StaticDecoder`).

A tiny Qwen2 / Llama model's forward, with the same weights and the same arithmetic as the transformers
modules, over a preallocated KV cache: one causal prefill of the right-padded prompts, then one token per
row per step at the row's own position. The rollout module's docstring says why it is hand-written.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def check_supported(model: Any, *, allow_training: bool = False) -> None:
    """Refuse a model configuration the decoder does not implement, naming every unsupported part.

    `allow_training`: a model in train mode is accepted (the packed scorer, which applies no dropout; the tiny
    backbones have none); the decoder itself samples in eval mode only."""
    cfg = model.config
    rope = getattr(cfg, "rope_parameters", None) or {"rope_type": "default", "rope_theta": cfg.rope_theta}
    problems = [
        f"model_type {cfg.model_type!r}" if cfg.model_type not in ("qwen2", "llama") else "",
        f"hidden_act {cfg.hidden_act!r}" if cfg.hidden_act != "silu" else "",
        f"rope_type {rope.get('rope_type')!r}" if rope.get("rope_type", "default") != "default" else "",
        "sliding-window attention" if getattr(cfg, "use_sliding_window", False) else "",
        "the model is not in eval mode" if model.training and not allow_training else "",
    ]
    if any(problems):
        raise ValueError(
            f"StaticDecoder: unsupported {', '.join(p for p in problems if p)}; use model.generate"
        )


def fused_layer(layer: Any) -> tuple:
    """One decoder layer's weights as the decoder reads them: q/k/v and gate/up concatenated, one matmul each."""
    att, mlp = layer.self_attn, layer.mlp
    qkv_b = (
        None if att.q_proj.bias is None else torch.cat([att.q_proj.bias, att.k_proj.bias, att.v_proj.bias])
    )
    return (
        layer.input_layernorm.weight,
        torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]),
        qkv_b,
        att.o_proj.weight,
        att.o_proj.bias,
        layer.post_attention_layernorm.weight,
        torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
        None if mlp.gate_proj.bias is None else torch.cat([mlp.gate_proj.bias, mlp.up_proj.bias]),
        mlp.down_proj.weight,
        mlp.down_proj.bias,
    )


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, with rotate_half(x) * sin == roll(x) * signed_sin bit for bit
    (cat(-x2, x1) * sin == cat(x2, x1) * cat(-sin1, sin2): negation is exact), in one op fewer."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin


def rope_tables(model: Any, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin [*positions.shape, head_dim] at `positions`: the model's default RoPE angles, sin with
    its first half negated for `rope`'s roll."""
    freqs = positions.float()[..., None] * model.model.rotary_emb.inv_freq.float()
    angles = torch.cat([freqs, freqs], dim=-1)
    half = angles.shape[-1] // 2
    sin = angles.sin()
    return angles.cos().to(dtype), torch.cat([-sin[..., :half], sin[..., half:]], -1).to(dtype)


class StaticDecoder:
    """Incremental forward of a tiny Qwen2 / Llama model over a preallocated KV cache [rows, heads, T, dim].

    Takes the weights from `model` as they are now (call again after an optimizer step). Supports
    the configurations the tiny backbones use: SiLU MLP, default RoPE, full attention, optional
    q/k/v/o biases, grouped KV heads. The lm_head is called as a module, so forward hooks on it apply.
    """

    def __init__(self, model: Any, rows: int, length: int):
        cfg = model.config
        check_supported(model)
        self.model, self.heads, self.kv_heads = model, cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        self.layers = [fused_layer(layer) for layer in model.model.layers]
        weight = model.model.embed_tokens.weight
        self.embed, self.norm = weight, model.model.norm.weight
        self.dev = weight.device
        # [T, head_dim] each
        self.cos, self.sin = rope_tables(model, torch.arange(length, device=self.dev), weight.dtype)
        # Uninitialised: attention reads only slots < `filled`, and every such slot has been written.
        self.k = [self._cache(rows) for _ in self.layers]
        self.v = [self._cache(rows) for _ in self.layers]
        self.rows = torch.arange(rows, device=self.dev)
        self.valid = torch.zeros(rows, length, dtype=torch.bool, device=self.dev)  # slot holds a real token
        self.scale = self.head_dim**-0.5
        self.prompt_slots = 0
        self.filled = 0  # cache slots 0..filled-1 are written (for every row)

    def _cache(self, rows: int) -> torch.Tensor:
        return torch.empty(
            (rows, self.kv_heads, self.cos.shape[0], self.head_dim), dtype=self.embed.dtype, device=self.dev
        )

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only decoder rows `rows` (indices into the current rows, repeats allowed), in that order.

        Only the written slots are copied, by `index_select` straight into the new cache (a quarter of
        the time of copying whole caches for the 16 -> 128 row expansion after the prefill). The caches
        keep their shape and strides, so the attention products see the same memory layout.
        """
        f = self.filled

        def copy(cache: torch.Tensor) -> torch.Tensor:
            new = self._cache(len(rows))
            torch.index_select(cache[:, :, :f], 0, rows, out=new[:, :, :f])
            return new

        self.k, self.v = [copy(k) for k in self.k], [copy(v) for v in self.v]
        self.valid = self.valid.index_select(0, rows)
        self.rows = torch.arange(len(rows), device=self.dev)

    def _block(
        self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, write: Any, attend: Any
    ) -> torch.Tensor:
        """h [N, S, D] through every layer; `write(l, k, v)` stores keys/values, `attend(l, q)` attends."""
        n, s, _ = h.shape
        nh, nkv, hd = self.heads, self.kv_heads, self.head_dim
        for i, (ln1, w_qkv, b_qkv, w_o, b_o, ln2, w_gu, b_gu, w_down, b_down) in enumerate(self.layers):
            x = F.rms_norm(h, (h.shape[-1],), ln1, self.eps)
            qkv = F.linear(x, w_qkv, b_qkv).view(n, s, nh + 2 * nkv, hd).transpose(1, 2)  # [N, H+2KV, S, hd]
            qk = rope(qkv[:, : nh + nkv], cos, sin)
            write(i, qk[:, nh:], qkv[:, nh + nkv :])
            att = attend(i, qk[:, :nh])  # [N, H, S, hd]
            h = h + F.linear(att.transpose(1, 2).reshape(n, s, nh * hd), w_o, b_o)
            x = F.rms_norm(h, (h.shape[-1],), ln2, self.eps)
            gate, up = F.linear(x, w_gu, b_gu).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate, inplace=True) * up, w_down, b_down)  # gate: a fresh output
        return h

    def prefill(self, ids: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """Right-padded prompts [N, P] -> logits [N, V] at each row's last prompt token."""
        p = self.prompt_slots = self.filled = ids.shape[1]
        self.valid[:, :p] = torch.arange(p, device=self.dev)[None, :] < lens[:, None]
        cos, sin = self.cos[:p], self.sin[:p]

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> None:
            self.k[i][:, :, :p], self.v[i][:, :, :p] = k, v

        def attend(i: int, q: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(
                q,
                self.k[i][:, :, :p],
                self.v[i][:, :, :p],
                is_causal=True,
                enable_gqa=self.kv_heads != self.heads,
            )

        h = self._block(F.embedding(ids, self.embed), cos, sin, write, attend)
        last = h[self.rows, lens - 1]  # [N, D]
        return self.model.lm_head(F.rms_norm(last, (last.shape[-1],), self.norm, self.eps))

    def step(self, token: torch.Tensor, t: int, pos: torch.Tensor) -> torch.Tensor:
        """Feed response token t [N] at sequence positions pos [N] -> logits [N, V] for token t + 1.

        Cache slots: 0..P-1 hold the prompts (valid below each row's length), P + t response token t
        of every row. Attention is order-free, so slots need not follow positions; RoPE uses `pos`.
        """
        slot = self.prompt_slots + t
        self.valid[:, slot] = True
        self.filled = slot + 1
        masked = ~self.valid[:, None, None, : slot + 1]  # [N, 1, 1, W]: empty slots
        cos, sin = self.cos[pos][:, None, None], self.sin[pos][:, None, None]  # [N, 1, 1, hd]
        group = self.heads // self.kv_heads

        def write(i: int, k: torch.Tensor, v: torch.Tensor) -> None:
            self.k[i][:, :, slot], self.v[i][:, :, slot] = k[:, :, 0], v[:, :, 0]

        def attend(i: int, q: torch.Tensor) -> torch.Tensor:
            k, v = self.k[i][:, :, : slot + 1], self.v[i][:, :, : slot + 1]
            if group > 1:
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            scores = torch.matmul(q, k.transpose(-1, -2)).mul_(self.scale).masked_fill_(masked, float("-inf"))
            return torch.matmul(torch.softmax(scores, dim=-1), v)

        h = self._block(F.embedding(token[:, None], self.embed), cos, sin, write, attend)[:, 0]
        return self.model.lm_head(F.rms_norm(h, (h.shape[-1],), self.norm, self.eps))


__all__ = ["StaticDecoder", "check_supported", "fused_layer", "rope", "rope_tables"]
