"""Everything a run needs before its first step: device, model, tokenizer, data, backend.

Kept apart from the loop so that the loop reads as the algorithm and nothing else.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from grpoctl.data import DataError, Example, eval_subset, file_hash, load_examples
from grpoctl.errors import UserError
from grpoctl.prompts import load_template

log = logging.getLogger("grpoctl")


def pick_device(cfg) -> torch.device:
    want = cfg.runtime.device
    if want == "cuda" and not torch.cuda.is_available():
        raise UserError("runtime.device=cuda but torch sees no CUDA device (use runtime.device=cpu or auto)")
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(want)


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def pick_dtype(cfg, device: torch.device) -> torch.dtype:
    if cfg.model.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[cfg.model.dtype]


def resolve_model_dir(cfg, say=print) -> str:
    """A local directory (or hub id) to load the policy from; builds the tiny warm-start if asked."""
    path = cfg.model.path
    if path == "tiny" or path.startswith("tiny@"):
        from grpoctl.tiny.warmstart import resolve_tiny_model

        return str(resolve_tiny_model(cfg, log=say))
    if not Path(path).exists() and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise UserError(f"model.path={path}: no such directory, and HF_HUB_OFFLINE=1 forbids the hub")
    return path


def load_policy(model_dir: str, device: torch.device, dtype: torch.dtype, gradient_checkpointing: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    except OSError as exc:
        raise UserError(f"cannot load a model from {model_dir}: {str(exc).splitlines()[0]}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.to(device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False  # the cache is useless with checkpointing during training
    model.train()
    return model, tokenizer


@dataclass
class RunData:
    train: list[Example]
    eval: list[Example]
    template_name: str
    template: str
    data_hash: str  # of the eval data: what makes two evals comparable


def load_run_data(cfg, need_train: bool = True) -> RunData:
    d = cfg.data
    try:
        template = load_template(cfg.prompt.template)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        if d.source == "synthetic":
            knobs = dict(min_digits=d.synthetic.min_digits, max_digits=d.synthetic.max_digits,
                         ops=tuple(d.synthetic.ops), num_operands=d.synthetic.num_operands)
            train = load_examples("synthetic", split="train", n=d.train_size, seed=cfg.seed, **knobs)
            pool = load_examples("synthetic", split="eval", n=None, seed=0, **knobs)
            data_hash = "synthetic:" + ",".join(f"{k}={v}" for k, v in sorted(knobs.items()))
        else:
            fields = dict(question_key=d.question_field, answer_key=d.answer_field) if d.source in ("jsonl", "math") else {}
            if d.source == "hub":
                fields = dict(question_field=d.question_field, answer_field=d.answer_field)
            train = load_examples(d.source, path=d.train_path, split=d.train_split, seed=cfg.seed, **fields)
            if d.train_size:
                train = train[: d.train_size]
            if d.eval_path is None:
                raise UserError(f"data.source={d.source} needs data.eval_path (a held-out jsonl or hub dataset)")
            pool = load_examples(d.source, path=d.eval_path, split=d.eval_split, seed=0, **fields)
            data_hash = file_hash(d.eval_path) if Path(d.eval_path).is_file() else f"hub:{d.eval_path}:{d.eval_split}"
    except DataError as exc:
        raise UserError(str(exc)) from None
    evals = eval_subset(pool, cfg.eval.subset, cfg.eval.subset_seed)
    # No eval problem is ever trained on, even when a user's files overlap: the whole pool
    # is held out, so another --subset or seed later never scores trained-on problems.
    held_out = {ex.question.strip() for ex in pool}
    train = [ex for ex in train if ex.question.strip() not in held_out]
    if need_train and not train:
        raise UserError("no training examples left after removing the eval problems")
    return RunData(train=train, eval=evals, template_name=cfg.prompt.template, template=template, data_hash=data_hash)
