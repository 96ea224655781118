"""Per-token log-probabilities and entropies of a causal LM.

On the reference model the vocabulary has 151,936 entries, so a (batch, seq,
vocab) tensor is the biggest thing in training memory. log p(label) is one
logit minus the row's logsumexp: we gather the label's logit instead of
materialising a full log_softmax, and work in float32 because bf16 logsumexp
over 150k entries loses the small differences policy ratios depend on.
"""

import inspect
from typing import Any

import torch

# Positions per entropy chunk: its temporaries are a few (chunk, vocab) float32 tensors,
# ~150 MB each at Qwen's 151,936-entry vocabulary, instead of (seq, vocab) per sequence.
ENTROPY_CHUNK = 256


def _as_float32(logits: torch.Tensor) -> torch.Tensor:
    # float64 stays (tests use it for reference values); half types are upcast.
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim.

    logits: (..., vocab). Returns (...), in float32 for half-precision input.
    H = logsumexp(z) - sum_i p_i z_i, with z shifted so its max is 0 first: that
    never exponentiates a large logit, and it keeps both terms small, so their
    difference does not cancel away the precision (1e4 + log 2 in float32 would).
    """
    logits = _as_float32(logits)
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    probs = torch.softmax(shifted, dim=-1)
    return torch.logsumexp(shifted, dim=-1) - (probs * shifted).sum(dim=-1)


def get_response_log_probs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    return_token_entropy: bool = False,
    attention_mask: torch.Tensor | None = None,
    entropy_with_grad: bool = False,
    chunk_tokens: int = 0,
) -> dict[str, torch.Tensor]:
    """log p(labels[t] | input_ids[: t + 1]) under a HF causal LM.

    input_ids, labels: (batch, seq) long; attention_mask: optional (batch, seq).
    Returns {"log_probs": (batch, seq) float32} and, only when asked,
    {"token_entropy": (batch, seq) float32}. The entropy is a diagnostic, so it is
    computed without gradient and one sequence at a time, which keeps its
    vocabulary-sized temporaries to one chunk of one row; `entropy_with_grad` (an
    entropy bonus trains on it) keeps its graph, which costs about one more
    logits-sized tensor.

    chunk_tokens > 0 applies the LM head and the log-softmax that many positions at a
    time (chunked_label_log_probs): the same values, and the full logits never exist.
    A model whose logits are not a plain Linear head on its decoder's output falls back
    to the full logits.
    """
    head = _chunkable_head(model) if chunk_tokens > 0 else None
    if head is not None:
        kwargs = {} if attention_mask is None else {"attention_mask": attention_mask}
        hidden = model.get_decoder()(input_ids, **kwargs).last_hidden_state
        return chunked_label_log_probs(hidden, head, labels, chunk_tokens, return_token_entropy, entropy_with_grad)
    if attention_mask is None:
        logits = model(input_ids).logits
    else:
        logits = model(input_ids, attention_mask=attention_mask).logits
    logits = _as_float32(logits)

    label_logits = logits.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    out = {"log_probs": label_logits - torch.logsumexp(logits, dim=-1)}

    if return_token_entropy:
        out["token_entropy"] = torch.stack([_entropy_rows(row, entropy_with_grad) for row in logits])
    return out


def _entropy_rows(logits: torch.Tensor, with_grad: bool = False) -> torch.Tensor:
    """(positions, vocab) -> (positions,) entropy, ENTROPY_CHUNK positions at a time
    (without gradient unless `with_grad`)."""
    with torch.set_grad_enabled(with_grad and torch.is_grad_enabled()):
        return torch.cat(
            [compute_entropy(logits[i : i + ENTROPY_CHUNK]) for i in range(0, logits.shape[0], ENTROPY_CHUNK)]
        )


# ------------------------------------------------------------------ chunked LM head


class _ChunkedLabelLogProbs(torch.autograd.Function):
    """The LM head and log-softmax, a chunk of positions at a time, in forward and backward.

    A plain loop over chunks saves nothing under autograd, which keeps every chunk's logits
    for the backward pass. Here the forward keeps only the hidden states and two numbers per
    position (logsumexp and entropy), and the backward rebuilds each chunk's logits from
    them, so no more than one chunk's (chunk, vocab) logits exist at any time. Within a
    chunk the work is in place where it can be: at most two float32 (chunk, vocab) tensors
    are alive (the logits and one more), in forward and in backward.
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        chunk_tokens: int,
        compute_dtype: torch.dtype,
        with_entropy: bool,
        entropy_with_grad: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden: (positions, hidden) the head's input; weight: (vocab, hidden); bias: (vocab,)
        or None; labels: (positions,) long. Returns log p(label) and the entropy, (positions,)
        float32 each (the entropy is empty unless `with_entropy`)."""
        n = hidden.shape[0]
        log_probs = torch.empty(n, dtype=torch.float32, device=hidden.device)
        logsumexp = torch.empty_like(log_probs)
        entropy = torch.empty_like(log_probs) if with_entropy else log_probs.new_empty(0)
        head = _head_in(weight, bias, compute_dtype)
        for start in range(0, n, chunk_tokens):
            rows = slice(start, start + chunk_tokens)
            logits = _chunk_logits(hidden[rows], head, compute_dtype)
            logsumexp[rows] = torch.logsumexp(logits, dim=-1)
            log_probs[rows] = logits.gather(-1, labels[rows, None]).squeeze(-1) - logsumexp[rows]
            if with_entropy:
                entropy[rows] = _entropy_in_place(logits, logsumexp[rows])
            del logits
        ctx.save_for_backward(hidden, weight, bias, labels, logsumexp, entropy)
        ctx.chunk_tokens, ctx.compute_dtype, ctx.entropy_with_grad = chunk_tokens, compute_dtype, entropy_with_grad
        if not entropy_with_grad:
            ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    def backward(ctx: Any, grad_log_probs: torch.Tensor, grad_entropy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """d/dz of log p(y) = z_y - logsumexp(z) is onehot(y) - p; of the entropy
        H = logsumexp(z) - sum p z it is -p (z - E_p[z]), where E_p[z] = logsumexp - H."""
        hidden, weight, bias, labels, logsumexp, entropy = ctx.saved_tensors
        chunk_tokens, compute_dtype = ctx.chunk_tokens, ctx.compute_dtype
        head = _head_in(weight, bias, compute_dtype)
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        # Summed over chunks in the weight's own dtype, not in a float32 buffer: that buffer
        # would be vocab x hidden x 4 B (0.9 GB on Qwen2.5-1.5B) for bf16 weights, and a bf16
        # sum rounds once per chunk, a few bf16 ulps in all.
        grad_weight = torch.zeros_like(weight) if want_weight else None
        grad_bias = torch.zeros_like(bias) if want_bias else None
        for start in range(0, hidden.shape[0], chunk_tokens):
            rows = slice(start, start + chunk_tokens)
            g = grad_log_probs[rows, None]
            logits = _chunk_logits(hidden[rows], head, compute_dtype)
            probs = logits.sub(logsumexp[rows, None]).exp_()
            if ctx.entropy_with_grad:
                # -p * ((z - E_p[z]) * dH + dlogp), built in the logits' own storage
                mean_logit = (logsumexp[rows] - entropy[rows])[:, None]
                grad_logits = probs.mul_(logits.sub_(mean_logit).mul_(grad_entropy[rows, None]).add_(g)).neg_()
            else:
                grad_logits = probs.mul_(g).neg_()
            del logits
            grad_logits.scatter_add_(-1, labels[rows, None], g)
            # The head ran in compute_dtype, so its gradient does too (as autograd would).
            grad_logits = grad_logits.to(compute_dtype)
            if grad_hidden is not None:
                grad_hidden[rows] = (grad_logits @ head[0]).to(hidden.dtype)
            if grad_weight is not None:
                if grad_weight.dtype == compute_dtype:  # in place, without a (vocab, hidden) temporary
                    grad_weight.addmm_(grad_logits.T, hidden[rows].to(compute_dtype))
                else:
                    grad_weight += grad_logits.T @ hidden[rows].to(compute_dtype)
            if grad_bias is not None:
                grad_bias += grad_logits.sum(0)
            del grad_logits
        return (
            grad_hidden,
            grad_weight,
            grad_bias,
            None,
            None,
            None,
            None,
            None,
        )


def _entropy_in_place(logits: torch.Tensor, logsumexp: torch.Tensor) -> torch.Tensor:
    """compute_entropy of float32 (chunk, vocab) logits whose logsumexp is known, with one
    temporary: it overwrites `logits` with their max-shifted values (see compute_entropy)."""
    row_max = logits.amax(dim=-1, keepdim=True)
    shifted = logits.sub_(row_max)
    shifted_logsumexp = logsumexp - row_max.squeeze(-1)
    probs = shifted.sub(shifted_logsumexp[:, None]).exp_()
    return shifted_logsumexp - probs.mul_(shifted).sum(dim=-1)


def _head_in(
    weight: torch.Tensor, bias: torch.Tensor | None, compute_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The head's weight (vocab, hidden) and bias in the dtype it computes in (autocast's copy)."""
    return weight.to(compute_dtype), None if bias is None else bias.to(compute_dtype)


def _chunk_logits(
    hidden: torch.Tensor, head: tuple[torch.Tensor, torch.Tensor | None], compute_dtype: torch.dtype
) -> torch.Tensor:
    """(chunk, hidden) -> (chunk, vocab) logits, computed as the plain head would, then float32."""
    return _as_float32(torch.nn.functional.linear(hidden.to(compute_dtype), *head))


def head_compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype the LM head computes in: autocast's when it is on, else the operands'."""
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return torch.promote_types(hidden.dtype, weight.dtype)


def chunked_label_log_probs(
    hidden: torch.Tensor,
    head: torch.nn.Linear,
    labels: torch.Tensor,
    chunk_tokens: int,
    return_token_entropy: bool = False,
    entropy_with_grad: bool = False,
) -> dict[str, torch.Tensor]:
    """log p(labels) (and the entropy) from the head's input, `chunk_tokens` positions at a time.

    hidden: (..., hidden) the last hidden states; labels: (...) long. Returns
    {"log_probs": (...) float32} and, when asked, {"token_entropy": (...) float32}, equal to
    the full-logits path's; the full logits never exist, in forward or backward.
    """
    compute_dtype = head_compute_dtype(hidden, head.weight)
    with_grad = return_token_entropy and entropy_with_grad and torch.is_grad_enabled()
    with torch.autocast(hidden.device.type, enabled=False):
        log_probs, entropy = _ChunkedLabelLogProbs.apply(
            hidden.reshape(-1, hidden.shape[-1]),
            head.weight,
            head.bias,
            labels.reshape(-1),
            chunk_tokens,
            compute_dtype,
            return_token_entropy,
            with_grad,
        )
    out = {"log_probs": log_probs.view(labels.shape)}
    if return_token_entropy:
        out["token_entropy"] = entropy.view(labels.shape) if with_grad else entropy.detach().view(labels.shape)
    return out


def _chunkable_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The model's LM head when the logits are exactly head(decoder output); None otherwise
    (no separate decoder, a head that is not a plain Linear, or logits post-processed)."""
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    head = get_head()
    config = getattr(model, "config", None)
    post_processed = any(
        getattr(config, name, None) not in (None, 1, 1.0) for name in ("final_logit_softcapping", "logit_scale")
    )
    if type(head) is not torch.nn.Linear or post_processed or get_decoder() is model:
        return None
    return head


def _checkpointing(model: torch.nn.Module) -> bool:
    """Gradient checkpointing is on (transformers then drops a cache passed to the layers)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # new name first: the old one warns
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def _forward_takes(model: torch.nn.Module, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def _cache_kwarg(model: torch.nn.Module) -> str:
    """transformers 5.x calls the forward's cache `cache`; older releases `past_key_values`."""
    return "cache" if _forward_takes(model, "cache") else "past_key_values"


def _prompt_groups(
    input_ids: torch.Tensor, response_mask: torch.Tensor
) -> tuple[list[int], torch.Tensor, list[int], list[tuple[int, ...]]] | None:
    """Each row's prompt length, response length and distinct-prompt index; None if a row has no response.

    Row b's response labels are response_mask[b] (one contiguous run, as
    collate_prompt_and_output_ids builds it); its prompt is input_ids[b, :prompt_len].
    """
    lengths = response_mask.sum(-1)
    if not bool((lengths > 0).all()):
        return None
    first = response_mask.int().argmax(-1)  # first response label; its input is the last prompt token
    prompt_lens = (first + 1).tolist()
    rows = input_ids.tolist()
    distinct: dict[tuple[int, ...], int] = {}
    row_prompt = [distinct.setdefault(tuple(row[:n]), len(distinct)) for row, n in zip(rows, prompt_lens, strict=True)]
    return prompt_lens, lengths, row_prompt, list(distinct)


def get_response_log_probs_shared_prompts(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    response_mask: torch.Tensor,
    return_token_entropy: bool = False,
    entropy_with_grad: bool = False,
    chunk_tokens: int = 0,
) -> dict[str, torch.Tensor]:
    """`get_response_log_probs` on the response positions, running each distinct prompt once.

    input_ids, labels, response_mask: (batch, seq), right-padded as
    collate_prompt_and_output_ids builds them. Returns {"log_probs": (batch, seq) float32}
    (and "token_entropy" when asked), equal to get_response_log_probs where response_mask
    is True and 0 elsewhere.

    The rows of a GRPO group share their prompt, so the plain forward computes every
    prompt group_size times. Here each distinct prompt goes through the model once (left
    padded, with its cache), its keys and values are indexed out to its rows, and only the
    responses run as a second forward on top of them; autograd sums the rows' gradients
    into the one prompt computation, which is the same gradient up to float rounding. The
    vocabulary projection is taken at response positions only. Falls back to the plain
    forward where sharing saves nothing (every prompt distinct) or cannot work (gradient
    checkpointing drops the cache). chunk_tokens > 0: the vocabulary projection is chunked
    as in get_response_log_probs.
    """
    groups = None if _checkpointing(model) else _prompt_groups(input_ids, response_mask)
    if groups is None or len(groups[3]) == input_ids.shape[0]:
        out = get_response_log_probs(
            model,
            input_ids,
            labels,
            return_token_entropy,
            entropy_with_grad=entropy_with_grad,
            chunk_tokens=chunk_tokens,
        )
        zero = torch.zeros((), dtype=out["log_probs"].dtype, device=input_ids.device)
        return {k: torch.where(response_mask.bool(), v, zero) for k, v in out.items()}
    from transformers import DynamicCache

    prompt_lens, resp_lens, row_prompt, prompts = groups
    device, B = input_ids.device, input_ids.shape[0]
    rows = torch.tensor(row_prompt, device=device)

    # 1. The distinct prompts, left-padded: their cache, and the logits of each first response token.
    width = max(len(p) for p in prompts)
    prompt_ids = torch.zeros(len(prompts), width, dtype=torch.long)
    prompt_att = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        prompt_ids[i, width - len(p) :] = torch.tensor(p)
        prompt_att[i, width - len(p) :] = 1
    prompt_ids, prompt_att = prompt_ids.to(device), prompt_att.to(device)
    # Chunked: both forwards stop at the decoder's hidden states, which the head takes per chunk.
    head = _chunkable_head(model) if chunk_tokens > 0 else None
    forward = model if head is None else model.get_decoder()
    last_only = {"logits_to_keep": 1} if _forward_takes(forward, "logits_to_keep") else {}
    first = forward(
        prompt_ids,
        attention_mask=prompt_att,
        position_ids=(prompt_att.cumsum(-1) - 1).clamp(min=0),
        use_cache=True,
        **last_only,
    )
    cache = first["cache"] if "cache" in first else first["past_key_values"]
    layers = [(layer.keys[rows], layer.values[rows]) for layer in cache.layers]

    # 2. The responses, each row on its prompt's keys and values. Input j is response token
    #    j, which predicts token j + 1; the last response token predicts nothing.
    span = int(resp_lens.max())
    compact = torch.arange(span, device=device) < resp_lens[:, None]  # (batch, span)
    targets = torch.zeros(B, span, dtype=torch.long, device=device)
    targets[compact] = labels[response_mask.bool()]

    # The two forwards' logits stay apart (no (batch, span, vocab) concatenation, which
    # would be one more vocabulary-sized copy): first response token, then the rest.
    def head_input(output: Any) -> torch.Tensor:
        """The logits (plain head) or the hidden states (chunked head) of a forward."""
        return output.logits if head is None else output.last_hidden_state

    parts = [(head_input(first)[:, -1:][rows], targets[:, :1])]
    if span > 1:
        starts = torch.tensor(prompt_lens, device=device)
        second = forward(
            targets[:, :-1],
            attention_mask=torch.cat([prompt_att[rows], compact[:, :-1].long()], dim=-1),
            position_ids=starts[:, None] + torch.arange(span - 1, device=device),
            use_cache=False,
            **{_cache_kwarg(forward): DynamicCache(layers)},
        )
        parts.append((head_input(second), targets[:, 1:]))

    def spread(per_position: list[torch.Tensor]) -> torch.Tensor:
        """(batch, span) values, in parts -> (batch, seq) at the response positions, 0 elsewhere."""
        flat = torch.cat(per_position, dim=1)[compact]
        return torch.zeros(labels.shape, dtype=flat.dtype, device=device).masked_scatter(response_mask.bool(), flat)

    log_probs, entropy = [], []
    for head_in, target in parts:
        if head is not None:
            chunked = chunked_label_log_probs(
                head_in, head, target, chunk_tokens, return_token_entropy, entropy_with_grad
            )
            log_probs.append(chunked["log_probs"])
            if return_token_entropy:
                entropy.append(chunked["token_entropy"])
            continue
        logits = _as_float32(head_in)  # (batch, n, vocab)
        label_logits = logits.gather(dim=-1, index=target.unsqueeze(-1)).squeeze(-1)
        log_probs.append(label_logits - torch.logsumexp(logits, dim=-1))
        if return_token_entropy:
            entropy.append(
                _entropy_rows(logits.reshape(-1, logits.shape[-1]), entropy_with_grad).view(logits.shape[:-1])
            )
    out = {"log_probs": spread(log_probs)}
    if return_token_entropy:
        out["token_entropy"] = spread(entropy)
    return out
