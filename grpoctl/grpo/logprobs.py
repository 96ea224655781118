"""Per-token log-probabilities and entropies of a causal LM.

On the reference model the vocabulary has 151,936 entries, so a (batch, seq,
vocab) tensor is the biggest thing in training memory. log p(label) is one
logit minus the row's logsumexp: we gather the label's logit instead of
materialising a full log_softmax, and work in float32 because bf16 logsumexp
over 150k entries loses the small differences policy ratios depend on.
"""

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
    model,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    return_token_entropy: bool = False,
    attention_mask: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """log p(labels[t] | input_ids[: t + 1]) under a HF causal LM.

    input_ids, labels: (batch, seq) long; attention_mask: optional (batch, seq).
    Returns {"log_probs": (batch, seq) float32} and, only when asked,
    {"token_entropy": (batch, seq) float32}. The entropy is a diagnostic, so it is
    computed without gradient and one sequence at a time, which keeps its
    vocabulary-sized temporaries to one chunk of one row.
    """
    if attention_mask is None:
        logits = model(input_ids).logits
    else:
        logits = model(input_ids, attention_mask=attention_mask).logits
    logits = _as_float32(logits)

    label_logits = logits.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    out = {"log_probs": label_logits - torch.logsumexp(logits, dim=-1)}

    if return_token_entropy:
        with torch.no_grad():
            out["token_entropy"] = torch.stack([
                torch.cat([compute_entropy(row[i : i + ENTROPY_CHUNK]) for i in range(0, row.shape[0], ENTROPY_CHUNK)])
                for row in logits
            ])
    return out
