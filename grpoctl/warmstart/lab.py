"""Build the lab's models (tiny/lab_recipe.py) from its traces (data/lab.py), once.

The base ships with the package (`shipped/lab-<key>/`, 4 MB), because its three phases
take about 12 CPU-minutes; the SFT starts (`lab-sft@N`) are built from it on first use
(about 3 CPU-minutes for all three: one run, three checkpoints) and cached under `runtime.cache_dir`.
`python -m grpoctl.warmstart.lab --ship` rebuilds the shipped base from the recipe.

Each phase draws its traces from its own random stream, keyed by the mixture, the seed and
the phase it continues from, as the pilots did, so a rebuild gives the same weights.
"""

from __future__ import annotations

import fcntl
import json
import math
import random
import shutil
import time
from pathlib import Path

import torch

from grpoctl.data.lab import MIXTURES, draw_trace
from grpoctl.errors import UserError
from grpoctl.grpo import collate_prompt_and_output_ids, get_response_log_probs, sft_microbatch_train_step
from grpoctl.tiny.lab_recipe import (
    BASE_PHASES,
    LAB_BASE,
    LAB_SFT,
    LAB_SIZES,
    SFT_PHASE,
    Phase,
    build_key,
    checkpointed,
    continued_phases,
    recipe_key,
    sft_build_key,
    sft_steps_of,
)
from grpoctl.tiny.model import SHIPPED, build_lab_tokenizer, build_model, save_model_dir
from grpoctl.warmstart.shipping import rebuild_shipped, ship_command

LAB_SEED = 0


def resolve_lab_model(path: str, cache_dir: str | Path, log=print) -> Path:
    """The model directory `model.path=path` names (`lab`, a variant base such as `lab-long`,
    or a checkpoint `lab-sft@N`, `lab-direct@N`), built if needed."""
    try:
        sft_steps = sft_steps_of(path)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    base = SHIPPED / f"{LAB_BASE}-{recipe_key(LAB_BASE)}"
    if not (base / "config.json").exists():
        base = _cached(Path(cache_dir) / base.name, lambda out: build_base(out, log), log)
    if path == LAB_BASE:
        return base
    if sft_steps is None:  # a variant base: shipped once its gates pass, else built on first use
        shipped = SHIPPED / f"{path}-{recipe_key(path)}"
        if (shipped / "config.json").exists():
            return shipped
        return _cached(Path(cache_dir) / shipped.name, lambda out: build_variant(base, path, out, log), log)
    # One run serves every lab-sft@N (lab-direct@N): its checkpoints at the family's Ns.
    family = path.partition("@")[0]
    build = build_sft if family == LAB_SFT else (lambda b, out, log: build_checkpoints(b, family, out, log))
    root = _cached(Path(cache_dir) / f"{family}-{build_key(family)}", lambda out: build(base, out, log), log)
    return root / f"step-{sft_steps}"


def _cached(root: Path, build, log) -> Path:
    """`root`, built by `build(tmp)` under a lock if it is not there: parallel sweep members
    may ask for the same model at once, and a half-built one is never seen."""
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "lab_build.json").exists():
            tmp = root.with_name(root.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            log(f"building {root.name} (once; cached in {root.parent})")
            build(tmp)
            shutil.rmtree(root, ignore_errors=True)
            tmp.rename(root)
    return root


def build_base(out: Path, log=print) -> Path:
    """The base model: every phase of BASE_PHASES from a random init, saved to `out`."""
    tokenizer = build_lab_tokenizer()
    model = build_model(tokenizer, seed=LAB_SEED, **LAB_SIZES)
    previous, done = None, []
    for phase in BASE_PHASES:
        done.append(train_phase(model, tokenizer, phase, previous, log=log))
        previous = phase.name
    save_model_dir(model, tokenizer, out)
    _write_meta(out, LAB_BASE, done)
    return out


def build_sft(base: Path, out: Path, log=print) -> Path:
    """The SFT starts: the base trained on narrow traces, saved at every step of SFT_STEPS."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    done = train_phase(model, tokenizer, SFT_PHASE, LAB_BASE, log=log, save_to=out)
    _write_meta(out, f"{LAB_SFT}@{SFT_PHASE.steps}", [done])
    return out


def _load(base: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), AutoTokenizer.from_pretrained(base)


def build_variant(base: Path, path: str, out: Path, log=print) -> Path:
    """A variant base (lab-long, lab-boxed): the base trained on the variant's phases, saved to `out`."""
    model, tokenizer = _load(base)
    previous, done = LAB_BASE, []
    for phase in continued_phases(path):
        done.append(train_phase(model, tokenizer, phase, previous, log=log))
        previous = phase.name
    save_model_dir(model, tokenizer, out)
    _write_meta(out, path, done, recipe_key(path))
    return out


def build_checkpoints(base: Path, family: str, out: Path, log=print) -> Path:
    """A checkpointed family (lab-direct@N): one run from the base, saved at each of its Ns."""
    model, tokenizer = _load(base)
    phase, steps = checkpointed(family)
    done = train_phase(model, tokenizer, phase, LAB_BASE, log=log, save_to=out, save_at=steps)
    _write_meta(out, f"{family}@{phase.steps}", [done], build_key(family))
    return out


def _write_meta(out: Path, path: str, phases: list[dict], key: str | None = None) -> None:
    key = key or (recipe_key(path) if path == LAB_BASE else sft_build_key())
    meta = {"model.path": path, "build_key": key, "seed": LAB_SEED, "phases": phases}
    (out / "lab_build.json").write_text(json.dumps(meta, indent=2))


def phase_lr(phase: Phase, step: int) -> float:
    """The learning rate at `step` (1-based): linear warm-up, then cosine to min_lr_ratio."""
    if step <= phase.warmup:
        return phase.lr * step / phase.warmup
    frac = (step - phase.warmup) / max(1, phase.steps - phase.warmup)
    return phase.lr * (phase.min_lr_ratio + (1 - phase.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def train_phase(
    model, tokenizer, phase: Phase, previous: str | None, log=print, save_to: Path | None = None, save_at=None
) -> dict:
    """Train `model` in place for one phase; with `save_to`, keep `step-N` dirs for the steps
    `save_at` (default: SFT_STEPS)."""
    from grpoctl.tiny.lab_recipe import SFT_STEPS

    save_at = SFT_STEPS if save_at is None else save_at
    mixture = MIXTURES[phase.mixture]
    rng = random.Random(f"lab-warmstart:{phase.mixture}:{phase.draw}:{previous}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=phase.lr, betas=(0.9, 0.95), weight_decay=0.0)
    cpu0 = time.process_time()
    model.train()
    pending: list = []
    loss = 0.0
    for step in range(1, phase.steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = phase_lr(phase, step)
        if not pending:  # length-bucketed batches: 8 batches' traces drawn at once, sorted by length
            pool = sorted(
                (draw_trace(rng, mixture) for _ in range(phase.batch * 8)),
                key=lambda t: len(t.prompt) + len(t.completion),
            )
            pending = [pool[i : i + phase.batch] for i in range(0, len(pool), phase.batch)]
            rng.shuffle(pending)
        batch = pending.pop()
        ids = collate_prompt_and_output_ids(
            [tokenizer(t.prompt, add_special_tokens=False).input_ids for t in batch],
            [tokenizer(t.completion, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for t in batch],
            tokenizer.pad_token_id,
        )
        log_probs = get_response_log_probs(model, ids["input_ids"], ids["labels"])["log_probs"]
        tokens = ids["response_mask"].sum(-1).float().mean().item()
        _, stats = sft_microbatch_train_step(log_probs, ids["response_mask"], 1, normalize_constant=tokens)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss = float(stats["loss"])
        if step % 250 == 0:
            log(
                f"  phase {phase.name} step {step}/{phase.steps}: loss/token {loss:.4f}, {time.process_time() - cpu0:.0f} CPU-s"
            )
        if save_to is not None and step in save_at:
            save_model_dir(model, tokenizer, save_to / f"step-{step}")
    return {"phase": phase.name, "final_loss_per_token": round(loss, 5), "cpu_s": round(time.process_time() - cpu0, 1)}


def ship(log=print) -> Path:
    """Rebuild the shipped base from the recipe, replacing what is there."""
    return rebuild_shipped(LAB_BASE, recipe_key(LAB_BASE), lambda folder: build_base(folder, log))


if __name__ == "__main__":
    ship_command("Rebuild the lab's base model shipped with the package.", ship)
