"""Turn (prompt, output) pairs into the shifted tensors a causal LM trains on.

The trainer works on the token ids the rollout engine returned: decoding them to
text and re-tokenizing can give different ids (merges across the prompt/output
boundary, normalization), and the log-probs must be those of the tokens that were
actually sampled. So the core is `collate_prompt_and_output_ids` on ids, and the
text version is a thin wrapper over it.
"""

from typing import Any

import torch


def collate_prompt_and_output_ids(
    prompt_ids: list[list[int]],
    output_ids: list[list[int]],
    pad_token_id: int,
) -> dict[str, torch.Tensor]:
    """Concatenate prompt and output ids per example, right-pad, shift by one.

    prompt_ids, output_ids: batch lists of token-id lists.
    Returns, each (batch, L - 1) where L = max(len(prompt) + len(output)):
      input_ids (long): the padded sequences without their last position,
      labels (long): the padded sequences without their first position (next tokens),
      response_mask (bool): True where the label is an output token.
    """
    if len(prompt_ids) != len(output_ids):
        raise ValueError(f"got {len(prompt_ids)} prompts but {len(output_ids)} outputs")
    lengths = [len(p) + len(o) for p, o in zip(prompt_ids, output_ids, strict=True)]
    max_len = max(lengths, default=0)
    if max_len < 2:
        raise ValueError("every batch needs at least one sequence of 2+ tokens to predict from")

    ids = torch.full((len(lengths), max_len), pad_token_id, dtype=torch.long)
    is_output = torch.zeros((len(lengths), max_len), dtype=torch.bool)
    for row, (p, o) in enumerate(zip(prompt_ids, output_ids, strict=True)):
        ids[row, : len(p) + len(o)] = torch.tensor(list(p) + list(o), dtype=torch.long)
        is_output[row, len(p) : len(p) + len(o)] = True

    # Position t of input_ids predicts labels[t] = ids[t + 1]; the mask follows the labels.
    return {
        "input_ids": ids[:, :-1],
        "labels": ids[:, 1:],
        "response_mask": is_output[:, 1:],
    }


def tokenize_prompt_and_output(
    prompt_strs: list[str], output_strs: list[str], tokenizer: Any
) -> dict[str, torch.Tensor]:
    """Tokenize prompts and outputs separately (no special tokens) and collate them.

    Padding uses the tokenizer's pad token, else its eos token.
    Returns input_ids, labels, response_mask, each (batch, L - 1); see
    `collate_prompt_and_output_ids`.
    """
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("the tokenizer has neither a pad token nor an eos token to pad with")
    # Separately, so the prompt/output boundary is exactly where the response starts.
    prompt_ids = tokenizer(list(prompt_strs), add_special_tokens=False)["input_ids"]
    output_ids = tokenizer(list(output_strs), add_special_tokens=False)["input_ids"]
    return collate_prompt_and_output_ids(prompt_ids, output_ids, pad)
