"""LoRA (model.lora): a low-rank adapter on every chosen linear layer, trained in place of the weights.

Built on transformers' own peft integration (`model.add_adapter`): the policy stays a
transformers model, whose forward the log-prob code calls as before, with peft's LoRA
layers in place of its linear layers. Only the adapter's tensors require gradients, so
the optimizer holds states for them alone, and `save_pretrained` writes the adapter alone
(adapter_config.json and adapter_model.safetensors, which name the base model): that is a
LoRA run's checkpoint. Samplers get the merged weights (rollout/merged.py).

peft is an optional extra (pip install grpoctl[lora]); nothing imports it until LoRA is on.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpoctl.config_keys import LORA_ALL_LINEAR
from grpoctl.errors import UserError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from grpoctl.config_schema import LoraConfig

ADAPTER_CONFIG = "adapter_config.json"  # peft's names for what save_pretrained writes for an adapter
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def check_peft() -> None:
    """peft imports here, or one line that says how to get it."""
    # peft imports bitsandbytes where it is installed, whose CPU backend then warns that an
    # optional 4-bit kernel from the hub cannot load: LoRA here never runs 4-bit, so that
    # line would only alarm. Its logger is quieted below errors before the first import.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    try:
        import peft  # noqa: F401
    except ImportError as exc:
        raise UserError(
            f"model.lora needs peft, which does not import here ({exc}); pip install 'grpoctl[lora]'"
        ) from None


def adapter_base(path: str | Path) -> str | None:
    """The base model a LoRA checkpoint at `path` adapts (its adapter_config.json says), or
    None when `path` is not a LoRA checkpoint."""
    file = Path(path) / ADAPTER_CONFIG
    if not file.is_file():
        return None
    try:
        base = json.loads(file.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (ValueError, OSError, AttributeError) as exc:
        raise UserError(f"{file}: not a readable adapter config ({type(exc).__name__})") from None
    if not isinstance(base, str) or not base:
        raise UserError(f"{file} does not name its base model (base_model_name_or_path)")
    return base


def peft_config(lora: LoraConfig) -> object:
    """model.lora as peft's LoraConfig."""
    from peft import LoraConfig as PeftLoraConfig

    targets = list(lora.targets)
    return PeftLoraConfig(
        r=int(lora.rank),
        lora_alpha=int(lora.alpha),
        lora_dropout=float(lora.dropout),
        target_modules=LORA_ALL_LINEAR if targets == [LORA_ALL_LINEAR] else targets,
    )


def add_adapter(model: PreTrainedModel, lora: LoraConfig, base: str) -> None:
    """A fresh adapter on `model` (B = 0: the policy is the base model's until the first
    update; A drawn from torch's generator, so a seeded run draws the same); `base` is
    what its checkpoints name as their base model (an absolute path, or a hub id)."""
    check_peft()
    config = peft_config(lora)
    try:
        model.add_adapter(config)
    except ValueError as exc:  # no module matches the targets
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"model.lora.targets={list(lora.targets)}: {first}") from None
    model.peft_config["default"].base_model_name_or_path = str(Path(base).resolve()) if Path(base).is_dir() else base
    _adapter_in_float32(model)


def load_adapter(model: PreTrainedModel, adapter_dir: str) -> None:
    """The adapter of the LoRA checkpoint `adapter_dir` on `model`, trainable, bit for bit.

    Not transformers' load_adapter: that builds the adapter in the frozen weights' dtype and
    copies the saved float32 tensors into it, so a bf16 model's adapter would come back
    rounded to bf16 and a resumed run would drift from the one never stopped. Here the
    adapter is built, made float32, and then filled.
    """
    check_peft()
    from peft import LoraConfig as PeftLoraConfig
    from peft import set_peft_model_state_dict
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    base = adapter_base(adapter_dir)
    try:
        config = PeftLoraConfig.from_pretrained(adapter_dir)
        config.inference_mode = False  # peft saves adapters marked for inference: this one trains on
        model.add_adapter(config)
        _adapter_in_float32(model)
        # torch's load_state_dict result (missing_keys, unexpected_keys); peft annotates it loosely
        loaded: Any = set_peft_model_state_dict(model, load_file(Path(adapter_dir) / ADAPTER_WEIGHTS), "default")
    except (OSError, ValueError, KeyError, TypeError, SafetensorError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot load the LoRA adapter at {adapter_dir}: {first}") from None
    missing = [k for k in loaded.missing_keys if ".lora_" in k]
    if missing or loaded.unexpected_keys:
        what = missing[0] if missing else loaded.unexpected_keys[0]
        raise UserError(f"the LoRA adapter at {adapter_dir} does not fit the model at {base}: {what}")
    model.peft_config["default"].base_model_name_or_path = base


def _adapter_in_float32(model: PreTrainedModel) -> None:
    """The adapter's weights in float32 whatever the frozen model's dtype (peft's own default,
    which transformers' add_adapter skips): in bf16 an AdamW step smaller than half a
    weight's spacing rounds away (tests/test_precision.py). peft's layers then run their
    input through the adapter in float32 and return the frozen layer's dtype."""
    from peft.tuners.tuners_utils import cast_adapter_dtype

    cast_adapter_dtype(model, "default", autocast_adapter_dtype=True)
