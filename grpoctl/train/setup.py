"""Everything a run needs before its first step: device, dtype, model and tokenizer; and
the checks of all its input (its data is grpoctl/data/run_data.py's).

Kept apart from the step so that the step reads as the algorithm and nothing else.

`preflight` checks all of it that can be wrong (device, model directory, the installed
vLLM's version, data files, template, writable output directories) without writing a byte, so that `grpoctl train`
and `grpoctl eval` can refuse bad input before the registry or outputs/ exist.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from grpoctl.data import ENUMERATE_LIMIT, problem_count
from grpoctl.data.prompt_length import prompt_budget
from grpoctl.data.run_data import RunData, load_run_data
from grpoctl.errors import UserError
from grpoctl.rules import (
    check_vllm_version,
    compute_dtype,
    resolve_backend,
    resolve_device,
    resolve_dtype,
    vllm_installed,
    weights_dtype,
)
from grpoctl.tiny.lab_recipe import is_lab_path, sft_steps_of
from grpoctl.train.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_base, add_adapter, check_peft, load_adapter

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from grpoctl.config import RunConfig
    from grpoctl.config_schema import LoraConfig
    from grpoctl.formatting import Say

log = logging.getLogger("grpoctl")


def pick_device(cfg: RunConfig) -> torch.device:
    want = cfg.runtime.device
    if want == "cuda" and not torch.cuda.is_available():
        raise UserError("runtime.device=cuda but torch sees no CUDA device (use runtime.device=cpu or auto)")
    return torch.device(resolve_device(want, torch.cuda.is_available()))


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def pick_dtype(cfg: RunConfig, device: torch.device) -> torch.dtype:
    """What the policy's weights are stored in (model.dtype; bf16-mixed: float32)."""
    return TORCH_DTYPES[weights_dtype(resolve_dtype(cfg.model.dtype, device.type))]


def pick_autocast(cfg: RunConfig, device: torch.device) -> Callable[[], AbstractContextManager]:
    """What the policy's forward passes run under: bf16 autocast for model.dtype=bf16-mixed
    (matmuls in bf16, softmax and norms in fp32, the weights and their gradients fp32), else
    nothing. The backward pass runs outside it, in the dtypes the forward recorded."""
    compute = TORCH_DTYPES[compute_dtype(resolve_dtype(cfg.model.dtype, device.type))]
    if compute == pick_dtype(cfg, device):
        return contextlib.nullcontext
    return functools.partial(torch.autocast, device_type=device.type, dtype=compute)


# What a model directory must hold to be loaded (weights: safetensors, sharded or not, or
# the older pytorch_model.bin; a tokenizer: any of the files transformers reads one from).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def preflight(
    cfg: RunConfig,
    warn: Say = print,
    need_model: bool = True,
    need_train: bool = True,
    writes: bool = True,
    model_source: str | None = None,
) -> RunData:
    """Check what a run needs and load its data, writing nothing; returns the data.

    Raises UserError naming the first problem. `need_model=False` skips model.path (a
    resume loads its checkpoint instead, checked on its own); `writes=False` skips the
    output directories (an eval writes no checkpoints). The tokenizer and context that
    decide which prompts are too long come from `model_source` (default model.path; a
    resume's checkpoint directory).
    """
    pick_device(cfg)
    if need_model:
        check_model_path(cfg)
    uses_vllm = resolve_backend(cfg.rollout.backend, vllm_installed()) == "vllm"
    if uses_vllm:
        from grpoctl.rollout.vllm import vllm_available

        ok, found = vllm_available()  # its version, or why it does not import
        if not ok and cfg.rollout.backend == "vllm":
            alternatives = "hf" if vllm_installed() else "hf or auto"
            raise UserError(
                f"rollout.backend=vllm but vllm is unavailable ({found}); use rollout.backend={alternatives}"
            )
        if not ok:
            raise UserError(
                f"rollout.backend=auto means vllm where it is installed, and this one does not import "
                f"({found}); use rollout.backend=hf"
            )
        check_vllm_version(found, cfg.rollout.allow_untested_vllm)
    if cfg.model.lora.enabled:
        check_peft()
    source = model_source or cfg.model.path
    budget = prompt_budget(cfg, str(adapter_base(source) or source))
    data = load_run_data(cfg, need_train=need_train, warn=warn, budget=budget)
    if writes:
        check_writable(cfg.checkpoint.dir, "checkpoint.dir")
        if need_model and (cfg.model.path.startswith("tiny") or is_lab_path(cfg.model.path)):
            check_writable(cfg.runtime.cache_dir, "runtime.cache_dir")
    return data


def check_model_path(cfg: RunConfig) -> None:
    """model.path names the tiny model, a loadable model directory, or (online) a hub id."""
    path = cfg.model.path
    if path == "tiny" or path.startswith("tiny@"):
        syn = cfg.data.synthetic
        count = problem_count(syn.min_digits, syn.max_digits, tuple(syn.ops), syn.num_operands)
        if count > ENUMERATE_LIMIT:
            raise UserError(
                f"model.path={path}: the tiny warm-start trains on every synthetic problem, and these "
                f"data.synthetic settings make {count:,} (at most {ENUMERATE_LIMIT:,}); "
                "use a model directory, or fewer digits or operands"
            )
        return
    if is_lab_path(path):
        try:
            sft_steps_of(path)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        return
    if Path(path).is_dir():
        check_model_dir(path, cfg)
    elif Path(path).exists():
        raise UserError(f"model.path={path} is a file, expected a model directory")
    elif os.environ.get("HF_HUB_OFFLINE") == "1":
        raise UserError(f"model.path={path}: no such directory, and HF_HUB_OFFLINE=1 forbids the hub")
    elif path.startswith((".", "/", "~")) or path.count("/") != 1:
        raise UserError(f"model.path={path}: no such directory (and not a hub id such as Qwen/Qwen2.5-Math-1.5B)")


def check_model_dir(path: str | Path, cfg: RunConfig | None = None) -> dict:
    """The model's config.json, once the directory is seen to hold what loading it needs.

    Reads config.json and the safetensors headers (not the weights): a truncated or
    corrupt file is refused in one line here instead of a traceback from deep inside
    transformers. With `cfg`, also refuses generation lengths the model has no room for.
    """
    path = Path(path)
    if (path / ADAPTER_CONFIG).is_file():
        return _check_adapter_dir(path, cfg)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise UserError(f"{path} is not a model directory (no config.json)")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise UserError(f"{config_file}: not a readable model config ({str(exc).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise UserError(f"{config_file}: not a model config (expected a JSON object)")
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise UserError(f"{path}: no model weights (expected model.safetensors)")
    for weights in sorted(path.glob("*.safetensors")):
        _check_safetensors(weights)
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
            raise UserError(f"{index}: not a readable weight index ({type(exc).__name__})") from None
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            raise UserError(f"{path}: weight shard {missing[0]} is missing ({len(missing)} of {len(shards)})")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(f"{path}: no tokenizer (expected tokenizer.json or tokenizer_config.json)")
    positions = config.get("max_position_embeddings")
    if cfg is not None and isinstance(positions, int):
        for key in ("rollout.max_tokens", "eval.max_tokens"):
            value = cfg.rollout.max_tokens if key.startswith("rollout") else cfg.eval.max_tokens
            if value >= positions:
                raise UserError(
                    f"{key}={value} leaves no room for the prompt: the model at {path} has "
                    f"{positions} positions (max_position_embeddings)"
                )
    return config


def _check_adapter_dir(path: Path, cfg: RunConfig | None) -> dict:
    """A LoRA checkpoint: its adapter's files, and its base model's (whose config.json is returned)."""
    check_peft()
    base = adapter_base(path)
    weights = path / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise UserError(f"{path}: a LoRA checkpoint without its adapter's weights ({ADAPTER_WEIGHTS})")
    _check_safetensors(weights)
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(f"{path}: no tokenizer (expected tokenizer.json or tokenizer_config.json)")
    if base is not None and Path(base).is_dir():
        return check_model_dir(base, cfg)
    if base is not None and not base.startswith((".", "/", "~")) and base.count("/") == 1:
        return {}  # a hub id: transformers loads it from its cache (or the hub)
    raise UserError(f"{path}: its LoRA adapter's base model {base} is not a model directory here")


def _check_safetensors(file: Path) -> None:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt"):
            pass  # opening reads and checks the header and the file's length, not the tensors
    except (SafetensorError, OSError) as exc:
        raise UserError(f"{file}: corrupt or truncated safetensors ({str(exc).splitlines()[0]})") from None


def check_writable(path: str | Path, key: str) -> None:
    """`path` is a directory we may write into, or one we could create: checked, not tried."""
    target = Path(path).absolute()
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UserError(f"{key}={path}: {probe} is a file, not a directory")
    # os.access honours read-only mounts and the immutable flag even for root
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{key}={path}: {probe} is not writable")


def resolve_model_dir(cfg: RunConfig, say: Say = print) -> str:
    """A local directory (or hub id) to load the policy from; builds the tiny warm-start if asked."""
    path = cfg.model.path
    if path == "tiny" or path.startswith("tiny@"):
        from grpoctl.warmstart.tiny import resolve_tiny_model

        return str(resolve_tiny_model(cfg, log=say))
    if is_lab_path(path):
        from grpoctl.warmstart.lab import resolve_lab_model

        return str(resolve_lab_model(path, cfg.runtime.cache_dir, log=say))
    if not Path(path).exists() and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise UserError(f"model.path={path}: no such directory, and HF_HUB_OFFLINE=1 forbids the hub")
    return path


def load_policy(
    model_dir: str,
    device: torch.device,
    dtype: torch.dtype,
    gradient_checkpointing: bool,
    lora: LoraConfig | None = None,
    adapter_dir: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The policy and its tokenizer from `model_dir`, on `device`, its weights in `dtype`.

    LoRA (train/lora.py): `adapter_dir` (a LoRA checkpoint) puts its adapter on the model,
    trainable; else `lora.enabled` adds a fresh one. Either way the model's own weights are
    frozen. A LoRA checkpoint given as `model_dir` loads its base model and its adapter.
    """
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if adapter_dir is None and adapter_base(model_dir) is not None:
        model_dir, adapter_dir = str(adapter_base(model_dir)), model_dir
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    except (OSError, ValueError, KeyError, SafetensorError) as exc:  # missing, corrupt or unknown-architecture files
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot load a model from {model_dir}: {first}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if adapter_dir is not None:
        load_adapter(model, adapter_dir)
    elif lora is not None and lora.enabled:
        add_adapter(model, lora, base=model_dir)
    model.to(device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False  # the cache is useless with checkpointing during training
    model.train()
    return model, tokenizer
