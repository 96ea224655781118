"""The prompt-length policy: a problem whose prompt leaves no room to answer is dropped at load.

Real datasets hold overlong problems (a pasted table, a whole paper). A prompt longer than
the model's context would otherwise reach the rollout backend, whose KV cache is sized by
the prompt: a 1 M-character problem asks the lean decoder for gigabytes and the run dies
in a traceback. So, at load, before the eval subset is drawn:

    context  = min(max_position_embeddings, rollout.vllm.max_model_len when vLLM rolls out)
    train problems whose prompt has more than  context - rollout.max_tokens  tokens are dropped
    eval problems whose prompt has more than   context - eval.max_tokens     tokens are dropped

This is verl's `filter_overlong_prompts` (drop), not TRL's `max_prompt_length` (cut on the
left): a cut problem is a different problem, with a ground truth that may no longer follow.
The counts are printed and recorded with the run (metrics.OVERLONG_TRAIN_DROPPED and
metrics.OVERLONG_EVAL_DROPPED).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpoctl.data.examples import Example
from grpoctl.errors import UserError
from grpoctl.prompts import format_prompt
from grpoctl.rules import resolve_backend, vllm_installed
from grpoctl.tiny.lab_recipe import is_lab_path

if TYPE_CHECKING:
    from grpoctl.config import RunConfig

PREFIX_CHARS_PER_TOKEN = 16  # characters per token a long prompt's prefix is allowed before all is tokenized


@dataclass(frozen=True)
class PromptBudget:
    """How many prompt tokens a problem may have, and the tokenizer that counts them."""

    tokenizer: Any  # a transformers tokenizer (anything with __call__ -> input_ids)
    context: int  # the positions a sequence may use in all
    source: str  # where the context came from, for messages

    def limit(self, max_new_tokens: int) -> int:
        return self.context - max_new_tokens

    def prompt_tokens(self, prompt: str) -> int:
        # verbose=False: measuring a prompt longer than the tokenizer's model_max_length is
        # the point here, and transformers would log "Token indices sequence length is
        # longer than ..." for it, a second line on stderr beside grpoctl's own refusal.
        return len(self.tokenizer(prompt, add_special_tokens=False, verbose=False).input_ids)

    def fits(self, prompt: str, limit: int) -> bool:
        """Whether `prompt` has at most `limit` tokens, without tokenizing all of a huge one."""
        # Byte-level tokenizers never make more tokens than the text has bytes: a short
        # prompt fits without tokenizing at all.
        if len(prompt.encode("utf-8")) <= limit:
            return True
        # A 1 M-character problem is decided on a prefix: tokenizing all of it costs
        # hundreds of MB of heap that stays resident. A prefix has at most one token fewer
        # than the whole at its cut, so more than limit + 1 tokens there means overlong.
        head = prompt[: PREFIX_CHARS_PER_TOKEN * (limit + 2)]
        if len(head) < len(prompt) and self.prompt_tokens(head) > limit + 1:
            return False
        return self.prompt_tokens(prompt) <= limit


def model_positions(model_dir: str | Path) -> int | None:
    """max_position_embeddings from a model directory's config.json (None if it has none)."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return value if isinstance(value, int) and value > 0 else None


def prompt_budget(cfg: RunConfig, model_source: str) -> PromptBudget:
    """The tokenizer and context of the model a run will load from `model_source`: the tiny
    model's own (built in-process, no files needed), a model directory's, or a hub id's."""
    uses_vllm = resolve_backend(cfg.rollout.backend, vllm_installed()) == "vllm"
    positions: int | None
    if model_source == "tiny" or model_source.startswith("tiny@"):
        from grpoctl.tiny.model import TINY_MAX_POSITIONS, build_tokenizer

        tokenizer, positions, source = build_tokenizer(), TINY_MAX_POSITIONS, "the tiny model"
    elif is_lab_path(model_source):
        from grpoctl.tiny.model import TINY_MAX_POSITIONS, build_lab_tokenizer

        tokenizer, positions, source = build_lab_tokenizer(), TINY_MAX_POSITIONS, "the lab model"
    else:
        from transformers import AutoConfig, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(model_source)
            found = model_positions(model_source) if Path(model_source).is_dir() else None
            positions = (
                found
                if found is not None
                else getattr(AutoConfig.from_pretrained(model_source), "max_position_embeddings", None)
            )
        except (OSError, ValueError, KeyError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise UserError(f"cannot load the tokenizer of {model_source}: {first}") from None
        source = f"{model_source}'s max_position_embeddings"
    context = int(positions) if positions else 1 << 30
    if uses_vllm and int(cfg.rollout.vllm.max_model_len) < context:
        context, source = int(cfg.rollout.vllm.max_model_len), "rollout.vllm.max_model_len"
    return PromptBudget(tokenizer, context, source)


def drop_overlong(
    examples: list[Example], template: str, budget: PromptBudget, max_new_tokens: int
) -> tuple[list[Example], int]:
    """The examples whose formatted prompt fits in budget.limit(max_new_tokens) tokens, in
    their order, and how many were dropped."""
    limit = budget.limit(max_new_tokens)
    kept = []
    for ex in examples:
        prompt = format_prompt(template, ex.question)
        if budget.fits(prompt, limit):
            kept.append(ex)
    return kept, len(examples) - len(kept)


def describe_drop(what: str, dropped: int, total: int, budget: PromptBudget, key: str, max_new: int) -> str:
    """One line on what was dropped, e.g. for the run's start and for a refusal."""
    return (
        f"{dropped:,} of {total:,} {what} have a prompt over {budget.limit(max_new):,} tokens "
        f"(context {budget.context:,} from {budget.source}, minus {key}={max_new})"
    )
