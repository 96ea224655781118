"""Sampling loop for the transformers backend: `generate`'s draws without `generate`'s overhead.

It reproduces what `model.generate(do_sample=True, ...)` draws, token for token, for the
same seed: every step takes the float32 logits of the last position, masks EOS while fewer
than min_tokens are out (MinNewTokensLengthLogitsProcessor), applies temperature and
top-p only when they are not 1 (transformers' own warpers), takes softmax and one
`torch.multinomial` over the whole batch, replaces the tokens of finished rows by padding,
and stops once every row has finished (EOS, a stop string by transformers'
StopStringCriteria over the response, or max_tokens). The random stream is consumed exactly as there, so the
samples are the same; greedy is the argmax of the same scores. Token for token on CPU, where the tests check
it; on a GPU the two forward passes may differ in the last bits of a logit, which can flip a draw.

What it does not repeat: the prompts of a group are identical, so each distinct prompt is
run once (prefill) and its keys and values shared by its rows; the KV cache is allocated
once; the forward pass is `qwen2_decoder`'s, not the module's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from grpoctl.rollout import qwen2_decoder as dec
from grpoctl.rollout.base import SamplingSettings

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from transformers.generation.stopping_criteria import StoppingCriteria


class LeanSampler:
    """Generate from a transformers Qwen2 model with `generate`'s sampling semantics."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self._stop_criteria: dict[tuple[str, ...], StoppingCriteria | None] = {}

    def stop_criteria(self, stop: tuple[str, ...]) -> StoppingCriteria | None:
        if stop not in self._stop_criteria:
            from transformers.generation.stopping_criteria import StopStringCriteria

            self._stop_criteria[stop] = StopStringCriteria(self.tokenizer, list(stop)) if stop else None
        return self._stop_criteria[stop]

    @torch.inference_mode()
    def generate(
        self, prompt_ids: list[list[int]], sampling: SamplingSettings
    ) -> tuple[list[list[int]], list[bool], list[list[float]]]:
        """Continue each prompt; returns (response ids, truncated, sampled log-probs) per row.

        A response ends with (and keeps) the EOS or the token that completes a stop string;
        truncated means it ran to max_tokens instead. The log-prob of each token is under the
        distribution it was drawn from: after the EOS mask, temperature and top-p (0 when
        greedy).
        """
        w = dec.read_weights(self.model)
        device = w.embed.device
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        B, max_new = len(prompt_ids), sampling.max_tokens

        # Distinct prompts, left-padded to the widest, as `generate` pads the whole batch.
        distinct: dict[tuple[int, ...], int] = {}
        row_prompt = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompt_ids], device=device)
        width = max(len(p) for p in distinct)
        ids = torch.full((len(distinct), width), pad, dtype=torch.long)
        mask = torch.zeros(len(distinct), width, dtype=torch.long)
        for p, i in distinct.items():
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)

        cache = dec.KVCache.empty(w, B, width + max_new, device)
        cos, sin = dec.rotary_tables(w, width + max_new, device)
        logits = dec.prefill(w, ids, mask, row_prompt, cache, cos, sin)
        positions = mask.sum(-1)[row_prompt]  # next position of each row: its real prompt length

        # `sequences` mirrors generate's input_ids (prompt + generated); finished rows
        # continue with padding, as there.
        sequences = torch.full((B, width + max_new), pad, dtype=torch.long, device=device)
        sequences[:, :width] = ids[row_prompt]
        stop = self.stop_criteria(tuple(sampling.stop))
        unfinished = torch.ones(B, dtype=torch.bool, device=device)
        ended_at = torch.full((B,), max_new, dtype=torch.long, device=device)  # response length
        drawn_log_probs = torch.zeros(B, max_new, device=device)
        for t in range(max_new):
            tokens, log_probs = self._next_tokens(logits, t, sampling, eos)
            drawn_log_probs[:, t] = log_probs
            tokens = torch.where(unfinished, tokens, pad)
            sequences[:, width + t] = tokens
            done = tokens == eos
            if stop is not None:
                # Only the response is searched, as vLLM does and as the generate path cuts:
                # a stop string straddling the end of the prompt does not count.
                done |= stop(sequences[:, width : width + t + 1], None)
            newly = unfinished & done
            ended_at = torch.where(newly, t + 1, ended_at)
            unfinished &= ~done
            if t + 1 == max_new or not bool(unfinished.any()):
                break
            logits = dec.decode_step(w, tokens, positions + t, width + t, cache, cos, sin)

        generated, lengths = sequences[:, width:].tolist(), ended_at.tolist()
        drawn = drawn_log_probs.tolist()
        return (
            [row[:n] for row, n in zip(generated, lengths, strict=True)],
            unfinished.tolist(),
            [row[:n] for row, n in zip(drawn, lengths, strict=True)],
        )

    @staticmethod
    def _next_tokens(
        logits: torch.Tensor, t: int, sampling: SamplingSettings, eos: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, V) float32 logits -> (B,) tokens, as generate's processors, warpers and
        sampler, and (B,) the log-prob each was drawn with (0 when greedy)."""
        scores = logits
        if t < sampling.min_tokens and eos is not None:
            scores = scores.clone()
            scores[:, eos] = float("-inf")
        if sampling.greedy:
            tokens = scores.argmax(dim=-1)
            return tokens, torch.zeros(tokens.shape, device=tokens.device)
        if sampling.temperature != 1.0:
            from transformers.generation.logits_process import TemperatureLogitsWarper

            scores = TemperatureLogitsWarper(sampling.temperature)(None, scores)
        if sampling.top_p < 1.0:
            from transformers.generation.logits_process import TopPLogitsWarper

            scores = TopPLogitsWarper(sampling.top_p)(None, scores)
        probs = torch.softmax(scores, dim=-1)
        tokens = torch.multinomial(probs, num_samples=1)
        # The log of the drawn token's probability: one gather, no second (B, V) tensor.
        return tokens.squeeze(1), probs.gather(1, tokens).squeeze(1).log()
