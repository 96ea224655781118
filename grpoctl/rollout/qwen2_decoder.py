"""A Qwen2 forward pass for generation: plain tensor functions over a preallocated KV cache.

transformers' forward does per call what generation needs once: it builds a 4D mask,
checks its cache object, recomputes the rotary table, and goes through a dozen module
calls per layer. For the tiny model every one of those costs more than the arithmetic,
so generation spent ~4x its FLOPs in overhead. Here the weights are read straight from
the Hugging Face module (no copy: the trainer's updates are seen at the next call), the
rotary table is built once per call, and each decode step is a short run of tensor ops.

The arithmetic is transformers' own (Qwen2RMSNorm, rotate-half RoPE with the same cos and
sin, SwiGLU, tied or separate lm_head), in the same dtypes, so the logits agree with
`model(...)` to float rounding; tests/test_lean_generation.py checks it.

Shapes: B rows, U distinct prompts, W prompt width (left-padded), T = W + max_new cache
slots, H query heads, KV key/value heads, G = H / KV, D head_dim, h hidden, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from grpoctl.rollout.merged import linear_weight


@dataclass
class Layer:
    ln1: torch.Tensor
    q_w: torch.Tensor
    q_b: torch.Tensor | None
    k_w: torch.Tensor
    k_b: torch.Tensor | None
    v_w: torch.Tensor
    v_b: torch.Tensor | None
    o_w: torch.Tensor
    ln2: torch.Tensor
    gate_w: torch.Tensor
    up_w: torch.Tensor
    down_w: torch.Tensor


@dataclass
class Qwen2Weights:
    """Views of a Qwen2ForCausalLM's parameters and the sizes the forward needs."""

    embed: torch.Tensor  # (V, h)
    layers: list[Layer]
    norm: torch.Tensor  # (h,)
    lm_head: torch.Tensor  # (V, h); the embedding itself when tied
    inv_freq: torch.Tensor  # (D / 2,) float32, transformers' rotary buffer
    eps: float
    heads: int
    kv_heads: int
    head_dim: int

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why this module cannot use the lean forward (None when it can)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) != "qwen2":
        return f"model type {getattr(config, 'model_type', type(model).__name__)!r} (only qwen2 is implemented)"
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope != "default":
        return f"rope_type {rope!r}"
    if "sliding_attention" in (getattr(config, "layer_types", None) or []):
        return "sliding-window attention layers"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r}"
    if getattr(model.model.rotary_emb, "attention_scaling", 1.0) != 1.0:
        return "scaled rotary embeddings"
    return None


def read_weights(model: torch.nn.Module) -> Qwen2Weights:
    """The parameters of a transformers Qwen2ForCausalLM, as they are now (no copies; with a
    LoRA adapter, each adapted weight merged into a new tensor: rollout/merged.py)."""
    config, inner = model.config, model.model

    def bias(linear: torch.nn.Module) -> torch.Tensor | None:
        b = getattr(linear, "base_layer", linear).bias
        return None if b is None else b.detach()

    layers = []
    for block in inner.layers:
        attn, mlp = block.self_attn, block.mlp
        layers.append(
            Layer(
                ln1=block.input_layernorm.weight.detach(),
                q_w=linear_weight(attn.q_proj),
                q_b=bias(attn.q_proj),
                k_w=linear_weight(attn.k_proj),
                k_b=bias(attn.k_proj),
                v_w=linear_weight(attn.v_proj),
                v_b=bias(attn.v_proj),
                o_w=linear_weight(attn.o_proj),
                ln2=block.post_attention_layernorm.weight.detach(),
                gate_w=linear_weight(mlp.gate_proj),
                up_w=linear_weight(mlp.up_proj),
                down_w=linear_weight(mlp.down_proj),
            )
        )
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return Qwen2Weights(
        embed=inner.embed_tokens.weight.detach(),
        layers=layers,
        norm=inner.norm.weight.detach(),
        lm_head=linear_weight(model.lm_head),
        inv_freq=inner.rotary_emb.inv_freq.detach().float(),
        eps=float(config.rms_norm_eps),
        heads=int(config.num_attention_heads),
        kv_heads=int(config.num_key_value_heads),
        head_dim=int(head_dim),
    )


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """(..., h) -> (..., h): Qwen2RMSNorm, normalised in float32 and cast back before the weight."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def rotary_tables(w: Qwen2Weights, positions: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: (positions, D) in the weights' dtype, as Qwen2RotaryEmbedding computes them."""
    freqs = torch.arange(positions, device=device).float()[:, None] * w.inv_freq.to(device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(w.dtype), emb.sin().to(w.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE, rotate-half form: x (..., D) with cos, sin broadcastable to it."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


@dataclass
class KVCache:
    """Keys and values of every row and layer, preallocated for the whole generation.

    keys[l], values[l]: (B, KV, T, D). valid: (B, T) bool, False for left padding, so no
    query ever attends to it.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    valid: torch.Tensor

    @classmethod
    def empty(cls, w: Qwen2Weights, rows: int, slots: int, device: torch.device) -> KVCache:
        shape = (rows, w.kv_heads, slots, w.head_dim)
        return cls(
            [torch.empty(shape, dtype=w.dtype, device=device) for _ in w.layers],
            [torch.empty(shape, dtype=w.dtype, device=device) for _ in w.layers],
            torch.ones(rows, slots, dtype=torch.bool, device=device),
        )


def _mlp(x: torch.Tensor, layer: Layer) -> torch.Tensor:
    return F.linear(F.silu(F.linear(x, layer.gate_w)) * F.linear(x, layer.up_w), layer.down_w)


def prefill(
    w: Qwen2Weights,
    ids: torch.Tensor,
    mask: torch.Tensor,
    row_prompt: torch.Tensor,
    cache: KVCache,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> torch.Tensor:
    """Run the U distinct prompts once and give each of the B rows its prompt's keys and values.

    ids, mask: (U, W) left-padded prompt ids and their attention mask; row_prompt: (B,) the
    prompt of each row. Fills cache slots [0, W) and cache.valid. Returns the float32 logits
    of each row's next token: (B, V).
    """
    U, W = ids.shape
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # transformers: cumsum - 1 over real tokens
    c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)  # (U, 1, W, D)
    # Causal over real tokens; a padding query attends to itself only, which keeps its
    # (never attended) keys finite instead of the nan of an all-masked softmax row.
    causal = torch.ones(W, W, dtype=torch.bool, device=ids.device).tril()
    attend = (causal & mask[:, None, :].bool()) | torch.eye(W, dtype=torch.bool, device=ids.device)
    attend = attend.unsqueeze(1)  # (U, 1, W, W)
    x = w.embed[ids]
    for layer, keys, values in zip(w.layers, cache.keys, cache.values, strict=True):
        h = rms_norm(x, layer.ln1, w.eps)
        q = F.linear(h, layer.q_w, layer.q_b).view(U, W, w.heads, w.head_dim).transpose(1, 2)
        k = F.linear(h, layer.k_w, layer.k_b).view(U, W, w.kv_heads, w.head_dim).transpose(1, 2)
        v = F.linear(h, layer.v_w, layer.v_b).view(U, W, w.kv_heads, w.head_dim).transpose(1, 2)
        q, k = rotate(q, c, s), rotate(k, c, s)
        keys[:, :, :W] = k[row_prompt]
        values[:, :, :W] = v[row_prompt]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attend, enable_gqa=w.heads != w.kv_heads)
        x = x + F.linear(out.transpose(1, 2).reshape(U, W, -1), layer.o_w)
        x = x + _mlp(rms_norm(x, layer.ln2, w.eps), layer)
    cache.valid[:, :W] = mask.bool()[row_prompt]
    last = rms_norm(x[:, -1], w.norm, w.eps)
    return F.linear(last, w.lm_head).float()[row_prompt]


def decode_step(
    w: Qwen2Weights,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    slot: int,
    cache: KVCache,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> torch.Tensor:
    """One token per row: tokens, positions (B,) -> float32 logits (B, V); writes cache slot `slot`.

    The G query heads that share a key/value head are laid out as G queries against it
    (transformers' pack_gqa), so the keys are never repeated.
    """
    B = tokens.shape[0]
    c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)  # (B, 1, D)
    # Additive mask over the slots so far: 0 where valid, -inf on left padding.
    bias = torch.zeros(B, 1, 1, slot + 1, dtype=w.dtype, device=tokens.device)
    bias.masked_fill_(~cache.valid[:, None, None, : slot + 1], float("-inf"))
    groups, scale = w.heads // w.kv_heads, w.head_dim**-0.5
    x = w.embed[tokens]
    for layer, keys, values in zip(w.layers, cache.keys, cache.values, strict=True):
        h = rms_norm(x, layer.ln1, w.eps)
        q = rotate(F.linear(h, layer.q_w, layer.q_b).view(B, w.heads, w.head_dim), c, s)
        keys[:, :, slot] = rotate(F.linear(h, layer.k_w, layer.k_b).view(B, w.kv_heads, w.head_dim), c, s)
        values[:, :, slot] = F.linear(h, layer.v_w, layer.v_b).view(B, w.kv_heads, w.head_dim)
        # (B, KV, G, D) @ (B, KV, D, L): plain matmuls; CPU SDPA costs more than this at one query.
        scores = torch.matmul(
            q.view(B, w.kv_heads, groups, w.head_dim) * scale, keys[:, :, : slot + 1].transpose(-1, -2)
        )
        probs = torch.softmax((scores + bias).float(), dim=-1).to(w.dtype)
        out = torch.matmul(probs, values[:, :, : slot + 1])
        x = x + F.linear(out.reshape(B, -1), layer.o_w)
        x = x + _mlp(rms_norm(x, layer.ln2, w.eps), layer)
    return F.linear(rms_norm(x, w.norm, w.eps), w.lm_head).float()
