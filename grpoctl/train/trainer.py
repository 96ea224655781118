"""A run's life: prepare it, run the outer loop of GRPO steps, end with a status.

finished: all steps done. diverged: a non-finite loss or gradient (the last good
checkpoint stays). interrupted: Ctrl-C or SIGTERM (preemption), after writing what it had
(train/stop.py). failed: any other error, stored with the run. `resume()` continues a
run from a checkpoint after deleting the rows it wrote past that checkpoint.

One step of the outer loop is train/step.py's `grpo_step`.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from grpoctl.config import Config, config_diff, derived_sizes, to_dict, typed_config
from grpoctl.data import PromptStream
from grpoctl.data.curriculum import LevelCurriculum
from grpoctl.data.prompt_length import prompt_budget
from grpoctl.data.run_data import load_run_data
from grpoctl.formatting import Say
from grpoctl.grpo import PolicyGradientLoss
from grpoctl.registry.claims import ClaimLost, RegistryUnreachable
from grpoctl.rewards import configure_grading
from grpoctl.rollout import make_backend
from grpoctl.rules import heartbeat_s
from grpoctl.run_identity import config_hash
from grpoctl.tiny.lab_recipe import is_lab_path
from grpoctl.train.checkpoint import (
    CheckpointWriteError,
    capture_rng,
    checkpoint_dir,
    load_trainer_state,
    pick_resume_checkpoint,
    restore_rng,
)
from grpoctl.train.context import RunContext
from grpoctl.train.eval_and_checkpoint import checkpoint, evaluate_before_training
from grpoctl.train.lora import adapter_base
from grpoctl.train.memory import MemoryTracker
from grpoctl.train.optim import build_optimizer
from grpoctl.train.progress import Progress
from grpoctl.train.schedule import build_scheduler
from grpoctl.train.setup import (
    device_name,
    load_policy,
    pick_autocast,
    pick_device,
    pick_dtype,
    resolve_model_dir,
)
from grpoctl.train.step import Diverged, grpo_step
from grpoctl.train.stop import AbandonStep, StopRequest

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from grpoctl.data.run_data import RunData
    from grpoctl.registry import Checkpoint, Registry, Run

log = logging.getLogger("grpoctl")


def default_run_name(cfg: Config | DictConfig) -> str:
    # The random suffix keeps names unique when several runs start in the same second.
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = cfg.model.path
    base = cfg.group or ("tiny" if path.startswith("tiny") else path if is_lab_path(path) else Path(path).name)
    name = f"{base}-{cfg.variant or 's' + str(cfg.seed)}-{stamp}-{secrets.token_hex(2)}"
    return name.replace("/", "_").replace(" ", "")


def start(
    cfg: DictConfig, registry: Registry, parent: str | None = None, say: Say = print, data: RunData | None = None
) -> str:
    """A new run from a validated config (and its data, if already loaded). Returns the final status."""
    name = cfg.name or default_run_name(cfg)
    run = prepare(cfg, registry, say, data=data)
    run.run = registry.create_run(
        name=name,
        config=to_dict(cfg),
        config_diff=config_diff(cfg),
        config_hash=config_hash(cfg),
        seed=cfg.seed,
        total_steps=cfg.loop.n_grpo_steps,
        group=cfg.group,
        variant=cfg.variant,
        output_dir=str(checkpoint_dir(cfg, name)),
        parent=parent,
        device=device_name(run.memory.device),
        data_fingerprint=run.data.fingerprint(),
    )
    registry.set_status(run.run_id, "running", pid=os.getpid())
    say(f"run {name} (id {run.run.id}) → {registry.url.render_as_string(hide_password=True)}")
    return outer_loop(run, fresh=True)


def resume(
    cfg: DictConfig,
    registry: Registry,
    row: Run,
    say: Say = print,
    checkpoint: Checkpoint | None = None,
    data: RunData | None = None,
) -> str:
    """Continue the run `row` from `checkpoint` (default: its newest, whose files must be whole)."""
    if row.id is None:
        raise ValueError(f"run {row.name} is not a stored row")
    run_id = row.id
    last = checkpoint or pick_resume_checkpoint(registry.checkpoints(run_id), row.name)[0]
    saved = load_trainer_state(Path(last.path))
    # Weights come from the checkpoint; the KL reference stays the run's initial policy.
    run = prepare(cfg, registry, say, model_dir=last.path, data=data)
    # The one-writer claim, before the first write: of two resumers, one stops here.
    registry.claim_run(run_id)
    run.run, run.state = row, saved.state
    run.optimizer.load_state_dict(saved.optimizer)
    run.scheduler.load_state_dict(saved.scheduler)
    restore_rng(saved.rng)
    run.rewind_stream()
    # Only now that everything is restored: forget what the run wrote after the checkpoint.
    for path in registry.truncate_after(run_id, run.state.step):
        shutil.rmtree(path, ignore_errors=True)
    registry.set_status(run_id, "running", pid=os.getpid())
    say(f"resuming run {row.name} from step {run.state.step} ({last.path})")
    return outer_loop(run, fresh=False)


def prepare(
    validated: DictConfig | Config,
    registry: Registry,
    say: Say,
    model_dir: str | None = None,
    data: RunData | None = None,
) -> RunContext:
    """Everything the steps use: device, data, policy (and KL reference), optimizer, schedule, loss, backend."""
    cfg = typed_config(validated)  # the engine reads the typed tree from here on
    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    configure_grading(workers=cfg.reward.grading_workers)
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg)
    data = data or load_run_data(cfg, budget=prompt_budget(cfg, model_dir or cfg.model.path))
    # A resumed run's weights come from its checkpoint; the initial policy is then needed only as the KL reference.
    # A LoRA run's checkpoint holds its adapter alone: its frozen base is the initial policy's.
    initial_dir: str | None
    adapter_dir = model_dir if model_dir is not None and adapter_base(model_dir) is not None else None
    if model_dir is None or adapter_dir is not None:
        model_dir = initial_dir = resolve_model_dir(cfg, say=say)
    else:
        initial_dir = resolve_model_dir(cfg, say=say) if cfg.loss.kl_beta > 0 else None
    model, tokenizer = load_policy(
        model_dir,
        device,
        pick_dtype(cfg, device),
        cfg.model.gradient_checkpointing,
        lora=cfg.model.lora,
        adapter_dir=adapter_dir,
    )
    ref_model = None
    if cfg.loss.kl_beta > 0 and initial_dir is not None:
        ref_model, _ = load_policy(initial_dir, device, pick_dtype(cfg, device), False)
        ref_model.eval().requires_grad_(False)
    optimizer = build_optimizer(model.parameters(), cfg.optimizer)
    updates_per_grpo_step = derived_sizes(cfg).optimizer_steps_per_grpo_step
    total_opt_steps = cfg.loop.n_grpo_steps * updates_per_grpo_step
    scheduler = build_scheduler(optimizer, cfg.optimizer, total_opt_steps, updates_per_grpo_step)
    backend = make_backend(cfg, model, tokenizer, model_dir, say=say)
    if adapter_dir is not None:
        backend.sync_weights(model)  # vLLM loaded the base's weights: the adapter goes in merged
    return RunContext(
        cfg=cfg,
        registry=registry,
        model=model,
        tokenizer=tokenizer,
        ref_model=ref_model,
        optimizer=optimizer,
        scheduler=scheduler,
        loss=policy_loss(cfg),
        backend=backend,
        data=data,
        stream=prompt_stream(cfg, data),
        memory=MemoryTracker(device, memory_pool=backend.memory_pool_bytes),
        autocast=pick_autocast(cfg, device),
        progress=Progress(cfg, live=cfg.logging.live),
    )


def prompt_stream(cfg: Config, data: RunData) -> PromptStream | LevelCurriculum:
    """The training prompts in a resumable order: one shuffle of them all, or the level curriculum."""
    c = cfg.data.curriculum
    if not c.enabled:
        return PromptStream(data.train, seed=cfg.seed)
    return LevelCurriculum(data.train, cfg.seed, cfg.rollout.group_size, c.decay, c.uniform_share)


def policy_loss(cfg: Config) -> PolicyGradientLoss:
    """cfg.loss as the one loss object of the run."""
    loss = cfg.loss
    return PolicyGradientLoss(
        loss_type=loss.loss_type,
        length_normalization=loss.length_normalization,
        cliprange=loss.cliprange,
        cliprange_high=loss.cliprange_high,
        importance_level=loss.importance_level,
        kl_beta=loss.kl_beta,
        normalize_constant=float(cfg.rollout.max_tokens),  # length_normalization=constant: Dr. GRPO's divisor
        entropy_coef=loss.entropy_coef,
        tis_cap=loss.tis_cap,
        cispo_ratio_max=loss.cispo_ratio_max,
        cispo_ratio_min=loss.cispo_ratio_min,
    )


def outer_loop(run: RunContext, fresh: bool) -> str:
    """The outer loop: GRPO steps from run.state.step + 1 to the last, until done, stopped
    or failed; then the run's status is recorded and returned."""
    cfg, registry, run_id, state = run.cfg, run.registry, run.run_id, run.state
    status, error = "finished", None
    stop = run.stop = StopRequest(cfg.runtime.on_signal)
    with stop:  # held until the status is recorded: a signal must not kill the bookkeeping
        try:
            with run.progress, Heartbeat(registry, run_id, stop=stop):
                if fresh and cfg.eval.at_start:
                    evaluate_before_training(run)
                while state.step < cfg.loop.n_grpo_steps and not stop.requested:
                    rng = capture_rng()
                    try:
                        grpo_step(run, state.step + 1)
                    except AbandonStep:
                        # Nothing of the step touched the weights or the optimizer: rewind the
                        # data and the RNGs, and the state is that of the last step (exactly so
                        # on CPU; on a GPU up to its non-deterministic kernels).
                        run.rewind_stream()
                        restore_rng(rng)
                        log.warning(f"{stop.requested}: abandoned step {state.step + 1} before it updated the weights")
                if stop.requested and state.step < cfg.loop.n_grpo_steps:
                    if state.last_checkpoint_step != state.step:
                        checkpoint(run)  # so --resume continues from here
                    status, error = "interrupted", stop.reason()
        except Diverged as exc:
            status, error = "diverged", str(exc)
        except CheckpointWriteError as exc:  # a full disk, a read-only directory: the run cannot go on
            status, error = "failed", str(exc)
        except KeyboardInterrupt:  # a second signal
            status, error = "interrupted", stop.reason(at_once=True)
        except (ClaimLost, RegistryUnreachable):
            # Another process owns the run now, or may by the time the registry answers
            # again: write nothing more (not even the status; the member records the end).
            stop.closing = True
            run.backend.close()
            raise
        except Exception as exc:  # recorded with the run, then re-raised for the CLI to report
            stop.closing = True
            registry.set_status(run_id, "failed", error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            run.backend.close()
            raise
        stop.closing = True
        registry.set_status(run_id, status, error=error)
        run.backend.close()
    run.progress.final(status, error, state.last_accuracy)
    return status


class Heartbeat(threading.Thread):
    """Beats every heartbeat_s() (60 s) even while one step takes minutes, so `stale` means
    dead, not slow, and the run's claim is renewed (rules.py: the claim's timings).

    Every few seconds it also looks whether `grpoctl runs stop RUN` asked this run to stop
    (from any machine: the request is in the registry), and if so signals this process
    SIGTERM, once: the run stops exactly as when it is preempted."""

    def __init__(
        self,
        registry: Registry,
        run_id: int,
        every_s: float | None = None,
        stop: StopRequest | None = None,
        check_s: float = 2.0,
    ):
        super().__init__(daemon=True)
        self.every_s = heartbeat_s() if every_s is None else every_s  # rules.py: the claim's timings
        self.registry, self.run_id, self.stop, self.check_s = registry, run_id, stop, check_s
        self._done = threading.Event()

    def run(self) -> None:
        beat = time.monotonic()
        while not self._done.wait(self.check_s):
            try:
                if self.stop is not None and not self.stop.requested and self.registry.stop_requested(self.run_id):
                    self.stop = None
                    os.kill(os.getpid(), signal.SIGTERM)
                if time.monotonic() - beat >= self.every_s:
                    beat = time.monotonic()
                    self.registry.heartbeat(self.run_id)
            except Exception:  # a busy database must not kill training; the next beat retries
                log.debug("heartbeat failed", exc_info=True)

    def __enter__(self) -> Heartbeat:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
