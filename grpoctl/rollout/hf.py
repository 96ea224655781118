"""Rollouts from the policy module itself: the backend that runs anywhere.

It samples from the very module being trained, so there are no weights to sync. Each
completion ends right after its stop string (kept, as vLLM's `include_stop_str_in_output`
does) or its EOS, so the response mask ends where the text ends and never covers padding.

Two engines draw the same samples for the same seed. `lean` (Qwen2 models, the default
for them) is grpoctl's own loop over a preallocated KV cache (`lean.py`); `generate` is
transformers' `model.generate` with left-padded prompts, for every other model, and the
reference the lean loop is tested against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from grpoctl.rollout.base import Rollouts, SamplingSettings
from grpoctl.rollout.lean import LeanSampler
from grpoctl.rollout.qwen2_decoder import unsupported_reason

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

ENGINES = ("auto", "lean", "generate")


class HFRolloutBackend:
    name = "hf"

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 256, engine: str = "auto"
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine {engine!r} is not one of {ENGINES}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size  # sequences per generate call: bounds KV-cache memory
        if engine == "auto":
            engine = "lean" if model is not None and unsupported_reason(model) is None else "generate"
        elif engine == "lean" and (why := unsupported_reason(model)):
            raise ValueError(f"the lean engine does not support this model: {why}")
        self.engine = engine
        self._lean = LeanSampler(model, tokenizer) if engine == "lean" else None

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: SamplingSettings, seed: int) -> Rollouts:
        torch.manual_seed(seed)
        prompt_ids = [self.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
        expanded = [ids for ids in prompt_ids for _ in range(n)]  # grouped: prompt i -> rows i*n..i*n+n-1
        # sampled_log_probs: the lean engine reports them; transformers' generate does not.
        out = Rollouts(prompt_ids=[], response_ids=[], response_texts=[], truncated=[])
        for start in range(0, len(expanded), self.batch_size):
            self._generate_chunk(expanded[start : start + self.batch_size], sampling, out)
        return out

    def _generate_chunk(self, prompt_ids: list[list[int]], sampling: SamplingSettings, out: Rollouts) -> None:
        if self._lean is not None:
            responses, truncated, drawn = self._lean.generate(prompt_ids, sampling)
            out.prompt_ids.extend(prompt_ids)
            out.response_ids.extend(responses)
            out.response_texts.extend(self.tokenizer.batch_decode(responses, skip_special_tokens=True))
            out.truncated.extend(truncated)
            out.sampled_log_probs = (out.sampled_log_probs or []) + drawn
            return
        pad = self.tokenizer.pad_token_id
        eos = self.tokenizer.eos_token_id
        width = max(len(p) for p in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, ids in enumerate(prompt_ids):
            input_ids[i, width - len(ids) :] = torch.tensor(ids)
            attention[i, width - len(ids) :] = 1
        device = self.model.device
        was_training = self.model.training
        self.model.eval()
        kwargs = dict(
            max_new_tokens=sampling.max_tokens,
            min_new_tokens=sampling.min_tokens,
            pad_token_id=pad,
            eos_token_id=eos,
            stop_strings=list(sampling.stop) or None,
            tokenizer=self.tokenizer,
            use_cache=True,
        )
        if sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            # top_k=0 disables the generation config's default top-k, so sampling matches vLLM's
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        sequences = self.model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device), **kwargs)
        if was_training:
            self.model.train()
        generated = sequences[:, width:].tolist()
        for ids, gen in zip(prompt_ids, generated, strict=True):
            response, truncated = self._cut(gen, sampling, eos)
            out.prompt_ids.append(ids)
            out.response_ids.append(response)
            out.response_texts.append(self.tokenizer.decode(response, skip_special_tokens=True))
            out.truncated.append(truncated)

    def _cut(self, generated: list[int], sampling: SamplingSettings, eos: int) -> tuple[list[int], bool]:
        """Keep tokens up to and including EOS or the token that completes a stop string."""
        # Every token spells at least one character, so a stop string that ends at token i
        # lies within the last len(stop) tokens: decode only that window.
        window = max((len(s) for s in sampling.stop), default=0)
        for i, token in enumerate(generated):
            if token == eos:
                return generated[: i + 1], False
            if window:
                tail = self.tokenizer.decode(generated[max(0, i + 1 - window) : i + 1])
                if any(s in tail for s in sampling.stop):
                    return generated[: i + 1], False
        return generated, True

    def sync_weights(self, model: torch.nn.Module) -> float:
        return 0.0  # generates with the policy module itself

    def before_training(self) -> None:
        pass

    def memory_pool_bytes(self) -> int:
        return 0  # no pool of its own: its KV cache is PyTorch's, freed when generate returns

    def close(self) -> None:
        pass
