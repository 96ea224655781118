"""A small registry for the dashboard's tests, built in-process in well under a second:
an ablation `abl` with a variant of 2 seeds (thin lines), one of 6 seeds (a band), one
whose gradient norm explodes (a health flag), and a run still `running` outside it."""

from __future__ import annotations

import copy
import functools

from grpoctl.config import load_config, to_dict
from grpoctl.registry import Registry
from grpoctl.rules import config_hash

STEPS = 12
VARIANTS = {"good": (3e-5, 2), "wide": (1e-5, 6), "hot": (1e-3, 1)}


@functools.cache
def _defaults() -> dict:
    return to_dict(load_config(None))  # once: building a config costs a fraction of a second


def config_of(lr: float, seed: int, steps: int) -> tuple[dict, dict]:
    """(config, its diff from the defaults): the defaults with this lr, seed and number of steps."""
    config = copy.deepcopy(_defaults())
    config["optimizer"]["lr"], config["seed"], config["loop"]["n_grpo_steps"] = lr, seed, steps
    return config, {"optimizer": {"lr": lr}, "seed": seed, "loop": {"n_grpo_steps": steps}}


def make_run(registry: Registry, name: str, lr: float, seed: int, steps: int, **fields):
    """A run whose config is the defaults with this lr, seed and number of steps."""
    config, diff = config_of(lr, seed, steps)
    return registry.create_run(
        name=name,
        config=config,
        config_diff=diff,
        config_hash=config_hash(config),
        seed=seed,
        total_steps=steps,
        **fields,
    )


def log_curve(registry: Registry, run, steps: range, top: float, spike_at: int | None = None) -> None:
    for step in steps:
        t = step / max(STEPS - 1, 1)
        grad = 50.0 if spike_at is not None and step >= spike_at else 0.5 + 0.05 * (step % 2)
        values = {
            "train/reward": 0.2 + (top - 0.2) * t + 0.01 * run.seed,
            "train/response_length": 20.0 - 5 * t,
            "train/token_entropy": 1.0 - 0.3 * t,
            "train/grad_norm": grad,
        }
        samples = [
            {
                "kind": "train",
                "prompt": f"What is {step} + {i}?",
                "response": f"<answer>{step + i if i % 2 == 0 else 0}</answer>",
                "ground_truth": str(step + i),
                "reward": 1.0 if i % 2 == 0 else 0.0,
                "format_reward": 1.0,
                "answer_reward": 1.0 if i % 2 == 0 else 0.0,
            }
            for i in range(4)
        ]
        evaluation = None
        if step % 4 == 0:
            evaluation = {
                "n": 64,
                "accuracy": round(0.1 + (top - 0.2) * t + 0.02 * run.seed * t, 4),
                "format_rate": 0.9,
                "mean_response_length": 18.0,
                "decoding": "{}",
            }
        registry.log_step(run.id, step, values, samples=samples, eval=evaluation)


def build(url: str) -> dict[str, int]:
    """The registry at `url` (a new SQLite path or an empty PostgreSQL database); {run name: id}."""
    ids = {}
    with Registry(url) as registry:
        sweep = registry.get_or_create_sweep("abl", "ablation", {"baseline": "good"})
        for variant, (lr, seeds) in VARIANTS.items():
            for seed in range(seeds):
                name = f"abl-{variant}-s{seed}"
                run = make_run(registry, name, lr, seed, STEPS, group="abl", variant=variant)
                registry.add_sweep_member(sweep.id, run.config_hash, variant, seed)
                top = {"good": 0.7, "wide": 0.5, "hot": 0.3}[variant]
                log_curve(registry, run, range(STEPS), top, spike_at=6 if variant == "hot" else None)
                registry.set_status(run.id, "finished")
                ids[name] = run.id
        live = make_run(registry, "solo-live", 3e-5, 5, STEPS)
        log_curve(registry, live, range(5), 0.6)
        registry.append_log("solo-live", "step 1 reward 0.2\nstep 2 reward 0.3\n")
        registry.add_tag(live.id, "watch")
        ids["solo-live"] = live.id
    return ids


def ids_of(url: str) -> dict[str, int]:
    """{run name: id} of a registry `build` made."""
    with Registry(url, readonly=True) as registry:
        return {run.name: run.id for run in registry.list_runs()}


def shared_sqlite(tmp_path_factory) -> tuple[str, dict[str, int]]:
    """(path, ids) of one SQLite copy for the whole test run: readers only."""
    from conftest import shared_once

    root = shared_once(tmp_path_factory, "ui-registry", lambda path: build(str(path / "registry.db")))
    url = str(root / "registry.db")
    return url, ids_of(url)
