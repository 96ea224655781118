"""A run's life: set up, step through the GRPO loop, record, checkpoint, end with a status.

finished: all steps done. diverged: a non-finite loss or gradient (the last good
checkpoint stays). interrupted: Ctrl-C or SIGTERM (preemption), after writing what it had
(see StopRequest). failed: any other error, stored with the run. `resume()` continues a
run from a checkpoint after deleting the rows it wrote past that checkpoint.
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
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from grpoctl.config import config_diff, config_hash, derived_sizes, to_dict
from grpoctl.data import PromptStream
from grpoctl.errors import UserError
from grpoctl.registry.claims import ClaimLost
from grpoctl.rollout import make_backend
from grpoctl.train import loop
from grpoctl.train.checkpoint import (
    CheckpointWriteError,
    TrainerState,
    capture_rng,
    checkpoint_dir,
    load_trainer_state,
    pick_resume_checkpoint,
    restore_rng,
    save_checkpoint,
    select_for_deletion,
)
from grpoctl.train.faults import fault_point
from grpoctl.train.evaluate import eval_record, eval_sampling, evaluate
from grpoctl.train.memory import MemoryTracker
from grpoctl.train.optim import build_optimizer
from grpoctl.train.schedule import build_scheduler
from grpoctl.train.progress import Progress
from grpoctl.train.setup import device_name, load_policy, load_run_data, pick_device, pick_dtype, resolve_model_dir

log = logging.getLogger("grpoctl")


@dataclass
class RunContext:
    cfg: object
    registry: object
    run: object
    model: object
    tokenizer: object
    optimizer: object
    scheduler: object
    backend: object
    ref_model: object
    data: object
    stream: PromptStream
    memory: MemoryTracker
    progress: Progress
    step: int = 0  # last completed GRPO step
    opt_step: int = 0
    best_accuracy: float | None = None
    last_accuracy: float | None = None
    last_checkpoint_step: int | None = None
    step_accuracy: float | None = None  # eval accuracy of the last step, if it evaluated
    stop: StopRequest | None = None
    step_start: tuple | None = None  # (data position, RNG states) when the step in flight began


def default_run_name(cfg) -> str:
    # The random suffix keeps names unique when several runs start in the same second.
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = cfg.group or ("tiny" if cfg.model.path.startswith("tiny") else Path(cfg.model.path).name)
    name = f"{base}-{cfg.variant or 's' + str(cfg.seed)}-{stamp}-{secrets.token_hex(2)}"
    return name.replace("/", "_").replace(" ", "")


def start(cfg, registry, parent: str | None = None, say=print, data=None) -> str:
    """A new run from a validated config (and its data, if already loaded). Returns the final status."""
    name = cfg.name or default_run_name(cfg)
    ctx = _prepare(cfg, registry, say, data=data)
    ctx.run = registry.create_run(
        name=name, config=to_dict(cfg), config_diff=config_diff(cfg), config_hash=config_hash(cfg),
        seed=cfg.seed, total_steps=cfg.loop.n_grpo_steps, group=cfg.group, variant=cfg.variant,
        output_dir=str(checkpoint_dir(cfg, name)), parent=parent, device=device_name(ctx.memory.device),
    )
    registry.set_status(ctx.run.id, "running", pid=os.getpid())
    say(f"run {name} (id {ctx.run.id}) → {registry.url.render_as_string(hide_password=True)}")
    return _run(ctx, fresh=True)


def resume(cfg, registry, run, say=print, checkpoint=None, data=None) -> str:
    """Continue `run` from `checkpoint` (default: its newest, whose files must be whole)."""
    last = checkpoint or pick_resume_checkpoint(registry.checkpoints(run.id), run.name)[0]
    state = load_trainer_state(Path(last.path))
    # Weights come from the checkpoint; the KL reference stays the run's initial policy.
    ctx = _prepare(cfg, registry, say, model_dir=last.path, data=data)
    # The one-writer claim, before the first write: of two resumers, one stops here.
    registry.claim_run(run.id)
    ctx.run = run
    ctx.optimizer.load_state_dict(state.optimizer)
    ctx.scheduler.load_state_dict(state.scheduler)
    restore_rng(state.rng)
    ctx.stream.seek(state.data_position)
    ctx.step, ctx.opt_step, ctx.best_accuracy = state.step, state.opt_step, state.best_accuracy
    ctx.last_checkpoint_step = state.step
    # Only now that everything is restored: forget what the run wrote after the checkpoint.
    for path in registry.truncate_after(run.id, state.step):
        shutil.rmtree(path, ignore_errors=True)
    registry.set_status(run.id, "running", pid=os.getpid())
    say(f"resuming run {run.name} from step {state.step} ({last.path})")
    return _run(ctx, fresh=False)


def _prepare(cfg, registry, say, model_dir: str | None = None, data=None) -> RunContext:
    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    torch.manual_seed(cfg.seed)
    device = pick_device(cfg)
    data = data or load_run_data(cfg)
    initial_dir = resolve_model_dir(cfg, say=say) if (model_dir is None or cfg.loss.kl_beta > 0) else None
    model_dir = model_dir or initial_dir
    model, tokenizer = load_policy(model_dir, device, pick_dtype(cfg, device), cfg.model.gradient_checkpointing)
    ref_model = None
    if cfg.loss.kl_beta > 0:
        ref_model, _ = load_policy(initial_dir, device, pick_dtype(cfg, device), False)
        ref_model.eval().requires_grad_(False)
    optimizer = build_optimizer(model.parameters(), cfg.optimizer)
    total_opt_steps = cfg.loop.n_grpo_steps * derived_sizes(cfg).optimizer_steps_per_grpo_step
    scheduler = build_scheduler(optimizer, cfg.optimizer, total_opt_steps)
    backend = make_backend(cfg, model, tokenizer, model_dir, say=say)
    return RunContext(
        cfg=cfg, registry=registry, run=None, model=model, tokenizer=tokenizer, optimizer=optimizer,
        scheduler=scheduler, backend=backend, ref_model=ref_model, data=data,
        stream=PromptStream(data.train, seed=cfg.seed), memory=MemoryTracker(device),
        progress=Progress(cfg, live=cfg.logging.live),
    )


def _run(ctx: RunContext, fresh: bool) -> str:
    cfg, registry, run = ctx.cfg, ctx.registry, ctx.run
    status, error = "finished", None
    stop = ctx.stop = StopRequest(cfg.runtime.on_signal)
    with stop:  # held until the status is recorded: a signal must not kill the bookkeeping
        try:
            with ctx.progress, Heartbeat(registry, run.id, stop=stop):
                if fresh and cfg.eval.at_start:
                    metrics, samples = _evaluate(ctx, step=0)
                    registry.log_step(run.id, 0, metrics, samples=samples)
                while ctx.step < cfg.loop.n_grpo_steps and not stop.requested:
                    try:
                        _one_step(ctx, ctx.step + 1)
                    except AbandonStep:
                        # Nothing of the step touched the weights or the optimizer: rewind the
                        # data and the RNG, and the state is exactly that of the last step.
                        position, rng = ctx.step_start
                        ctx.stream.seek(position)
                        restore_rng(rng)
                        log.warning(f"{stop.requested}: abandoned step {ctx.step + 1} before it updated the weights")
                if stop.requested and ctx.step < cfg.loop.n_grpo_steps:
                    if ctx.last_checkpoint_step != ctx.step:
                        _checkpoint(ctx, ctx.step, ctx.step_accuracy)  # so --resume continues from here
                    status, error = "interrupted", stop.reason()
        except loop.Diverged as exc:
            status, error = "diverged", str(exc)
        except CheckpointWriteError as exc:  # a full disk, a read-only directory: the run cannot go on
            status, error = "failed", str(exc)
        except KeyboardInterrupt:  # a second signal
            status, error = "interrupted", stop.reason(at_once=True)
        except ClaimLost:  # another process owns the run now: write nothing more
            stop.closing = True
            ctx.backend.close()
            raise
        except Exception as exc:  # recorded with the run, then re-raised for the CLI to report
            stop.closing = True
            registry.set_status(run.id, "failed", error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            ctx.backend.close()
            raise
        stop.closing = True
        registry.set_status(run.id, status, error=error)
        ctx.backend.close()
    ctx.progress.final(status, error, ctx.last_accuracy)
    return status


def _one_step(ctx: RunContext, step: int) -> None:
    cfg, t = ctx.cfg, {}
    t0 = time.perf_counter()
    ctx.step_start = (ctx.stream.position, capture_rng())
    with abortable(ctx.stop):  # until training begins, a signal may abandon the step (checkpoint_now)
        fault_point("step-start", step)
        ctx.memory.start_step()
        prompts, truths, _ = loop.step_prompts(cfg, ctx.stream, ctx.data.template)
        with loop.timed(t, "time/rollout"):
            rollouts = loop.generate_rollouts(ctx.backend, prompts, cfg, step)
        fault_point("step-rollouts", step)
        mem = ctx.memory.boundary("rollout")
        ctx.backend.before_training()
        timeouts_before = loop.grading_timeouts()
        with loop.timed(t, "time/reward"):
            batch = loop.make_rollout_batch(cfg, rollouts, truths, ctx.tokenizer.pad_token_id)
        with loop.timed(t, "time/old_log_probs"):
            loop.add_old_and_ref_log_probs(cfg, ctx.model, ctx.ref_model, batch)
    fault_point("step-train", step)
    with loop.timed(t, "time/train"):
        per_opt, summary, ctx.opt_step = loop.train_on_rollouts(
            cfg, ctx.model, ctx.optimizer, ctx.scheduler, batch, step, ctx.opt_step, memory=ctx.memory)
    loop.check_finite_weights(ctx.model, step)
    t["time/weight_sync"] = ctx.backend.sync_weights(ctx.model)
    metrics = {**batch.stats, **summary, **t, "train/grading_timeouts": loop.grading_timeouts() - timeouts_before}
    samples = loop.sample_rows(prompts, rollouts, truths, batch.scores, cfg.logging.samples_per_step)
    last = step == cfg.loop.n_grpo_steps
    if (cfg.eval.every and step % cfg.eval.every == 0) or last:
        eval_metrics, eval_samples = _evaluate(ctx, step)
        metrics |= eval_metrics
        samples += eval_samples
        mem |= ctx.memory.boundary("eval")
    metrics |= mem
    metrics["mem/peak"] = ctx.memory.step_peak()
    metrics["time/step"] = time.perf_counter() - t0
    ctx.registry.log_step(ctx.run.id, step, metrics, opt_metrics=per_opt, samples=samples)
    ctx.step = step
    ctx.step_accuracy = metrics.get("eval/accuracy")
    if last or (cfg.checkpoint.every and step % cfg.checkpoint.every == 0):
        _checkpoint(ctx, step, ctx.step_accuracy)
    ctx.progress.update(step, metrics, ctx.last_accuracy)


def _evaluate(ctx: RunContext, step: int) -> tuple[dict, list[dict]]:
    cfg = ctx.cfg
    t0 = time.perf_counter()
    sampling = eval_sampling(cfg.eval, cfg.rollout.stop)
    outcome = evaluate(ctx.backend, ctx.data.eval, ctx.data.template, cfg.prompt.reward, sampling,
                       cfg.eval.batch_size, n_samples=cfg.logging.samples_per_step, seed=cfg.eval.subset_seed)
    ctx.registry.add_eval(
        run_id=ctx.run.id, step=step,
        **eval_record(outcome, examples=ctx.data.eval, data_source=cfg.data.source, data_hash=ctx.data.data_hash,
                      template_name=ctx.data.template_name, template=ctx.data.template, sampling=sampling),
    )
    ctx.last_accuracy = outcome.accuracy
    if ctx.best_accuracy is None or outcome.accuracy > ctx.best_accuracy:
        ctx.best_accuracy = outcome.accuracy
    metrics = outcome.metrics() | {"time/eval": time.perf_counter() - t0}
    return metrics, outcome.samples


def _checkpoint(ctx: RunContext, step: int, accuracy: float | None) -> None:
    cfg = ctx.cfg
    state = TrainerState(step=step, opt_step=ctx.opt_step, data_position=ctx.stream.position,
                         optimizer=ctx.optimizer.state_dict(), scheduler=ctx.scheduler.state_dict(),
                         best_accuracy=ctx.best_accuracy, rng=capture_rng())
    # Renew the claim first: no other process can take the run over while the files are
    # written (the lease outlasts any save), so a fenced-out trainer never overwrites them.
    ctx.registry.heartbeat(ctx.run.id)
    path = save_checkpoint(Path(ctx.run.output_dir) / f"step-{step}", ctx.model, ctx.tokenizer, state, ctx.run.name)
    ctx.registry.add_checkpoint(ctx.run.id, step, str(path), eval_accuracy=accuracy)
    ctx.last_checkpoint_step = step
    for old in select_for_deletion(ctx.registry.checkpoints(ctx.run.id), cfg.checkpoint.keep_last,
                                   cfg.checkpoint.keep_best):
        shutil.rmtree(old.path, ignore_errors=True)
        ctx.registry.mark_checkpoint_deleted(old.id)


class Heartbeat(threading.Thread):
    """Beats every 60 s even while one step takes minutes, so `stale` means dead, not slow.

    Every few seconds it also looks whether `grpoctl runs stop RUN` asked this run to stop
    (from any machine: the request is in the registry), and if so signals this process
    SIGTERM, once: the run stops exactly as when it is preempted."""

    def __init__(self, registry, run_id: int, every_s: float = 60.0, stop: StopRequest | None = None,
                 check_s: float = 2.0):
        super().__init__(daemon=True)
        self.registry, self.run_id, self.every_s, self.stop, self.check_s = registry, run_id, every_s, stop, check_s
        self._done = threading.Event()

    def run(self):
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

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self._done.set()


class AbandonStep(BaseException):
    """Raised by the signal handler inside a step that has not touched the weights yet.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way
    (a grader that scores errors as wrong, say) can swallow it."""


class StopRequest:
    """SIGINT (Ctrl-C) and SIGTERM (preemption: Kubernetes, SLURM and Ray send it) end a
    run cleanly, marked `interrupted`, with a checkpoint that `--resume` continues from.

    On the first signal, with runtime.on_signal=finish_step (the default) the step in
    flight finishes and is checkpointed. With checkpoint_now a step that is still
    generating or grading, which has not touched the weights, the optimizer or the
    scheduler, is abandoned at once and the last completed step is checkpointed; a step
    whose updates have begun finishes first, since no consistent state exists mid-update.
    A second signal of either kind stops at once: the step in flight is not recorded, and
    resume continues from the last checkpoint written.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, on_signal: str = "finish_step"):
        self.on_signal = on_signal
        self.requested: str | None = None  # the first signal's name
        self.again: str | None = None  # the second's
        self.abortable = False  # inside the part of a step that may be abandoned
        self.closing = False  # the run is recording its end: nothing left to stop
        self._previous: dict = {}

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.closing:
            log.warning(f"{name}: the run is recording its end; it exits in a moment")
            return
        if self.requested or threading.current_thread() is not threading.main_thread():
            self.again = name
            raise KeyboardInterrupt
        self.requested = name
        if self.on_signal == "checkpoint_now" and self.abortable:
            self.abortable = False
            raise AbandonStep
        log.warning(f"{name}: stopping after this step ({'Ctrl-C' if name == 'SIGINT' else name} again to stop now)")

    def reason(self, at_once: bool = False) -> str:
        first = "the user (Ctrl-C)" if self.requested == "SIGINT" else self.requested or "the user (Ctrl-C)"
        if at_once and self.again:
            return (f"stopped at once by a second signal ({self.again} after {self.requested}); "
                    "the step in flight was not recorded")
        return f"interrupted by {first}"

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


@contextmanager
def abortable(stop: StopRequest | None):
    """The block during which a checkpoint_now signal abandons the step."""
    if stop is None:
        yield
        return
    stop.abortable = True
    try:
        yield
    finally:
        stop.abortable = False
