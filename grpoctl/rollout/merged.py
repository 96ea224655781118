"""The weights a sampler serves: the policy's own, or, for a LoRA policy, with its adapter merged in.

A LoRA policy (model.lora) is a frozen weight W per adapted linear layer plus an adapter
whose update is scale * B @ A (peft's `get_delta_weight`, which knows peft's scaling and
layouts). The module computes W x + scale * B A x; samplers that read weights instead of
running the module (vLLM, the lean decoder) need W + scale * B A as one matrix. It is
summed in float32 and rounded once, to the dtype the sampler serves in: a bf16 server then
holds the bf16 nearest to the policy's weight, not a sum of two terms each rounded already.
The module's own weights are never touched (peft's in-place merge and unmerge would round
the frozen weights a little at every sync).

Without an adapter the parameters are served as they are, uncopied.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

# peft's names inside an adapted layer: the wrapped Linear, and the adapter's own tensors.
BASE_LAYER = ".base_layer."
ADAPTER_PARTS = (".lora_A.", ".lora_B.", ".lora_embedding_A.", ".lora_embedding_B.", ".lora_magnitude_vector.")


def is_lora_layer(module: torch.nn.Module) -> bool:
    """A layer peft wrapped with an adapter (its base_layer holds the frozen weight)."""
    return hasattr(module, "base_layer") and hasattr(module, "get_delta_weight") and hasattr(module, "lora_A")


def has_adapter(model: torch.nn.Module) -> bool:
    return any(is_lora_layer(m) for m in model.modules())


@torch.no_grad()
def merged_weight(layer: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.Tensor:
    """(out, in): an adapted layer's frozen weight plus its active adapters' updates, summed
    in float32 and rounded once to `dtype` (default: the frozen weight's dtype). A new tensor."""
    base = layer.base_layer.weight
    # A new tensor: .float() of an fp32 weight is the weight itself, which must not move.
    total = base.detach().to(torch.float32, copy=True)
    for name in layer.active_adapters:
        if name in layer.lora_A:
            total += layer.get_delta_weight(name).float()
    return total.to(dtype or base.dtype)


def linear_weight(layer: torch.nn.Module) -> torch.Tensor:
    """The weight a linear layer applies, in its stored dtype: merged for an adapted layer,
    else its own parameter (detached, no copy)."""
    return merged_weight(layer) if is_lora_layer(layer) else layer.weight.detach()


def serving_weights(model: torch.nn.Module, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every parameter of the model under its own Hugging Face names:
    what a checkpoint of the merged policy would hold.

    Without an adapter: the parameters themselves, detached and uncopied (`dtype` unused: the
    receiver casts as it copies, as before LoRA existed). With one: adapted weights merged
    (merged_weight), rounded once to `dtype`; the other parameters cast to `dtype`; the
    adapter's own tensors left out. A tied LM head appears once, as the embedding.
    """
    adapted = {name: m for name, m in model.named_modules() if is_lora_layer(m)}
    for name, param in model.named_parameters():
        if not adapted:
            yield name, param.detach()
            continue
        if any(part in name for part in ADAPTER_PARTS):
            continue
        if BASE_LAYER in name:
            owner, _, leaf = name.partition(BASE_LAYER)
            if leaf == "weight":
                yield f"{owner}.weight", merged_weight(adapted[owner], dtype)
            else:
                yield f"{owner}.{leaf}", param.detach().to(dtype or param.dtype)
            continue
        yield name, param.detach().to(dtype or param.dtype)
