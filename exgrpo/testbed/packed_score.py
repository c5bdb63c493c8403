"""Teacher-forced scoring without padding work: `packed_score`, the CPU trainer's update and selection forward.

`exgrpo.testbed.rollout.score` runs the transformers forward over the right-padded [N, prompt + response]
batch: every row pays for its copy of the prompt (K rows of a group share one) and for the padding up to the
batch's longest sequence. In the trainer's mini-batches (64 rows of 16 questions, ~35 real tokens in a
~55-token padded row) that is about half of the forward and backward arithmetic, which is what the update's
time is (benchmarks/profile.md). `packed_score` computes the same function of the weights with less work:

- each distinct prompt runs once through the layers (right-padded, causal; only its keys/values and its
  last token's output are used), and its keys/values are gathered for the rows that share it: the
  gradient of a shared prompt is the sum of its rows' gradients, as autograd's `index_select` backward gives;
- the response tokens run packed, [M, D] with M = the real response tokens (minus each row's last, whose
  output predicts nothing), through every per-token op (norms, projections, MLP, lm_head); only the
  attention sees them in a padded [N, W] layout, where row i's token t (position len(prompt_i) + t, the
  position `score` gives it) attends to its prompt's valid slots and its own tokens <= t;
- log-softmax and entropy run only on the logits of real response tokens.

The layer arithmetic is `exgrpo.testbed.decoder`'s (q/k/v and gate/up fused into one matmul each, the same
RoPE): equal to the transformers forward up to float rounding (a different summation order; tests compare
values and gradients to `score` at 1e-5), not bit for bit. Same models as `StaticDecoder` (tiny Qwen2 /
Llama: SiLU MLP, default RoPE, full attention, optional biases, grouped KV heads); dropout is not applied
(the tiny backbones have none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from exgrpo.testbed.decoder import check_supported, fused_layer, rope, rope_tables
from exgrpo.testbed.rollout import check_score_args, token_stats


@dataclass
class _Layout:
    """Where every token of a packed batch lives. N rows, U distinct prompts, M packed response inputs."""

    copy_of: torch.Tensor  # [N] distinct prompt of each row
    prompt_ids: torch.Tensor  # [U, P] right-padded
    prompt_lens: torch.Tensor  # [U]
    row_lens: torch.Tensor  # [N] prompt length of each row
    flat_ids: torch.Tensor  # [M] response input tokens, row-major
    flat_pos: torch.Tensor  # [M] their sequence positions
    to_flat: torch.Tensor  # [M] index of each packed token in the padded [N * W] attention layout
    attn_mask: torch.Tensor  # [N, 1, W, P + W] True = attend
    logit_src: torch.Tensor  # [R] row of cat(prompt-end logits [N], packed logits [M]) predicting each token
    out_rows: torch.Tensor  # [R] (row, column) of each real response token in the [N, T] output
    out_cols: torch.Tensor


def _layout(
    prompts: list[list[int]], response_mask: torch.Tensor, response_ids: torch.Tensor, pad: int
) -> _Layout:
    """The index tensors of one batch (integer work only, no gradients)."""
    device = response_ids.device
    n, _ = response_ids.shape
    slot_of: dict[tuple[int, ...], int] = {}
    for p in prompts:
        slot_of.setdefault(tuple(p), len(slot_of))
    unique = list(slot_of)
    copy_of = torch.tensor([slot_of[tuple(p)] for p in prompts], device=device)
    prompt_lens = torch.tensor([len(key) for key in unique], device=device)
    longest = int(prompt_lens.max())
    prompt_ids = torch.full((len(unique), longest), pad, dtype=torch.long, device=device)
    for i, key in enumerate(unique):
        prompt_ids[i, : len(key)] = torch.tensor(key, dtype=torch.long)
    row_lens = prompt_lens[copy_of]
    resp_len = response_mask.sum(1)
    fed = (resp_len - 1).clamp(min=0)  # a row's last token is input to nothing that is scored
    width = max(int(fed.max()), 1)
    cols = torch.arange(width, device=device)
    fed_mask = cols[None, :] < fed[:, None]  # [N, W]
    rows_w, cols_w = fed_mask.nonzero(as_tuple=True)  # row-major
    m = len(rows_w)
    prompt_ok = torch.arange(longest, device=device)[None, :] < row_lens[:, None]  # [N, P]
    causal = cols[None, :] <= cols[:, None]  # [W, W]: query t sees response slot s <= t
    attn_mask = torch.cat(
        [prompt_ok[:, None, :].expand(n, width, longest), causal[None].expand(n, width, width)], -1
    )[:, None]
    out_rows, out_cols = response_mask.nonzero(as_tuple=True)
    # token 0 is predicted by the prompt's last position, token t > 0 by packed input t - 1
    packed_index = torch.zeros(n, max(int(resp_len.max()), 1), dtype=torch.long, device=device)
    packed_index[rows_w, cols_w + 1] = torch.arange(m, device=device) + n
    packed_index[:, 0] = torch.arange(n, device=device)
    return _Layout(
        copy_of=copy_of,
        prompt_ids=prompt_ids,
        prompt_lens=prompt_lens,
        row_lens=row_lens,
        flat_ids=response_ids[rows_w, cols_w],
        flat_pos=row_lens[rows_w] + cols_w,
        to_flat=rows_w * width + cols_w,
        attn_mask=attn_mask,
        logit_src=packed_index[out_rows, out_cols],
        out_rows=out_rows,
        out_cols=out_cols,
    )


@dataclass
class _Dims:
    heads: int
    kv_heads: int
    head_dim: int
    eps: float


def _dims(model: Any) -> _Dims:
    cfg = model.config
    heads = cfg.num_attention_heads
    return _Dims(
        heads,
        cfg.num_key_value_heads,
        getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
        cfg.rms_norm_eps,
    )


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, d: _Dims) -> torch.Tensor:
    """softmax(q k^T / sqrt(hd), masked) v as explicit matmuls: [N, H, S, hd] queries over [N, KV, W, hd].

    Not `scaled_dot_product_attention`: on CPU its backward for these shapes (a few heads of 24 dims, tens of
    positions) costs several times the matmuls' (benchmarks/results/train_speed.json)."""
    group = d.heads // d.kv_heads
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)).mul(d.head_dim**-0.5).masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def _mlp(
    h: torch.Tensor,
    ln2: torch.Tensor,
    w_gu: torch.Tensor,
    b_gu: Any,
    w_down: torch.Tensor,
    b_down: Any,
    eps: float,
) -> torch.Tensor:
    """h + the SiLU MLP of rms_norm(h) (gate and up in one matmul)."""
    x = F.rms_norm(h, (h.shape[-1],), ln2, eps)
    gate, up = F.linear(x, w_gu, b_gu).split(w_gu.shape[0] // 2, dim=-1)
    return h + F.linear(F.silu(gate) * up, w_down, b_down)


def _prompt_pass(model: Any, lay: _Layout, layers: list[tuple], d: _Dims) -> tuple[list, torch.Tensor]:
    """The distinct prompts through every layer: (per layer (k, v) [U, KV, P, hd], last-token hidden [U, D])."""
    nh, nkv, hd = d.heads, d.kv_heads, d.head_dim
    u, p = lay.prompt_ids.shape
    h = F.embedding(lay.prompt_ids, model.model.embed_tokens.weight)
    cos, sin = rope_tables(model, torch.arange(p, device=h.device), h.dtype)
    causal = torch.ones(p, p, dtype=torch.bool, device=h.device).tril()
    kv = []
    for ln1, w_qkv, b_qkv, w_o, b_o, ln2, w_gu, b_gu, w_down, b_down in layers:
        x = F.rms_norm(h, (h.shape[-1],), ln1, d.eps)
        q, k, v = (
            F.linear(x, w_qkv, b_qkv).view(u, p, nh + 2 * nkv, hd).transpose(1, 2).split([nh, nkv, nkv], 1)
        )
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        kv.append((k, v))
        att = _attend(q, k, v, causal, d)
        h = h + F.linear(att.transpose(1, 2).reshape(u, p, nh * hd), w_o, b_o)
        h = _mlp(h, ln2, w_gu, b_gu, w_down, b_down, d.eps)
    return kv, h[torch.arange(u, device=h.device), lay.prompt_lens - 1]


def _response_pass(model: Any, lay: _Layout, layers: list[tuple], kv: list, d: _Dims) -> torch.Tensor:
    """The packed response inputs through every layer, attending to their prompts' keys/values: [M, D]."""
    nh, nkv, hd = d.heads, d.kv_heads, d.head_dim
    n, width = lay.attn_mask.shape[0], lay.attn_mask.shape[2]
    h = F.embedding(lay.flat_ids, model.model.embed_tokens.weight)
    cos, sin = rope_tables(model, lay.flat_pos, h.dtype)
    cos, sin = cos[:, None], sin[:, None]  # [M, 1, hd]

    def padded(x: torch.Tensor) -> torch.Tensor:  # [M, heads, hd] -> [N, heads, W, hd], zeros off the rows
        full = x.new_zeros(n * width, *x.shape[1:]).index_put((lay.to_flat,), x)
        return full.view(n, width, *x.shape[1:]).transpose(1, 2)

    for (ln1, w_qkv, b_qkv, w_o, b_o, ln2, w_gu, b_gu, w_down, b_down), (pk, pv) in zip(
        layers, kv, strict=True
    ):
        x = F.rms_norm(h, (h.shape[-1],), ln1, d.eps)
        q, k, v = F.linear(x, w_qkv, b_qkv).view(-1, nh + 2 * nkv, hd).split([nh, nkv, nkv], 1)
        q, k, v = padded(rope(q, cos, sin)), padded(rope(k, cos, sin)), padded(v)
        k = torch.cat([pk.index_select(0, lay.copy_of), k], 2)
        v = torch.cat([pv.index_select(0, lay.copy_of), v], 2)
        att = _attend(q, k, v, lay.attn_mask, d)
        att = att.transpose(1, 2).reshape(n * width, nh * hd).index_select(0, lay.to_flat)
        h = h + F.linear(att, w_o, b_o)
        h = _mlp(h, ln2, w_gu, b_gu, w_down, b_down, d.eps)
    return h


def packed_score(
    model: Any,
    prompts: list[list[int]],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`exgrpo.testbed.rollout.score`'s contract (same arguments, outputs, masking, temperature and gradient
    behaviour) computed with the packed forward of the module docstring."""
    check_score_args(prompts, response_ids, response_mask)
    check_supported(model, allow_training=True)
    n, width = response_ids.shape
    out = torch.zeros(n, width, device=response_ids.device)
    if not bool(response_mask.any()):
        return out, (out.clone() if with_entropy else None)
    pad = 0 if model.config.pad_token_id is None else model.config.pad_token_id
    lay = _layout(prompts, response_mask, response_ids, pad)
    d = _dims(model)
    layers = [fused_layer(layer) for layer in model.model.layers]
    kv, prompt_last = _prompt_pass(model, lay, layers, d)
    hidden = torch.cat([prompt_last.index_select(0, lay.copy_of), _response_pass(model, lay, layers, kv, d)])
    norm = model.model.norm.weight
    logits = model.lm_head(F.rms_norm(hidden[lay.logit_src], (hidden.shape[-1],), norm, d.eps))
    logp_all, ent = token_stats(logits, temperature)  # [R, V], [R]
    tokens = response_ids[lay.out_rows, lay.out_cols]
    logp = out.index_put((lay.out_rows, lay.out_cols), logp_all.gather(1, tokens[:, None]).squeeze(1))
    if not with_entropy:
        return logp, None
    return logp, out.index_put((lay.out_rows, lay.out_cols), ent)


__all__ = ["packed_score"]
