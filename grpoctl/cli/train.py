"""`grpoctl train` and `grpoctl eval`: the commands that run models.

Flags are parsed and the config resolved (and validated) before anything heavy is
imported or anything is written, so bad input costs a fraction of a second and leaves
the registry untouched.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from grpoctl.cli.options import DbOption
from grpoctl.errors import UserError
from grpoctl.evals.checkpoint_config import EvalFlags, checkpoint_eval_config
from grpoctl.rules import check_claim_timings


def register(app: typer.Typer) -> None:
    app.command(
        "train",
        help="Run GRPO. CONFIG is a yaml diff from the defaults or a built-in name: lab (the default: the embedded "
        "lab, a 1M-parameter model on CPU) or addition (the tiny addition task); key=value overrides follow "
        "(dotted paths or short aliases: lr, loss, group_size, steps, ...).",
    )(train)
    app.command("eval", help="Evaluate a checkpoint directory on a deterministic subset and record the result.")(
        evaluate_checkpoint
    )


def split_args(args: list[str]) -> tuple[str | None, list[str]]:
    """[CONFIG] key=value ... -> (config path or None, overrides)."""
    if args and "=" not in args[0]:
        config, rest = args[0], args[1:]
    else:
        config, rest = None, list(args)
    for item in rest:
        if "=" not in item:
            raise UserError(f"unexpected argument '{item}': overrides are key=value (the config file comes first)")
    return config, rest


def _setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("transformers", "httpx", "urllib3", "vllm"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # per-shard bars would drown the run's own progress


def _setup_threads(cfg) -> None:
    """torch's thread count by grpoctl's rule (grpoctl/threads.py), said in one line."""
    from grpoctl.threads import configure_threads

    count, why = configure_threads(cfg)
    typer.echo(f"torch threads: {count} ({why})")


def train(
    args: Annotated[list[str] | None, typer.Argument(metavar="[CONFIG] [KEY=VALUE]...", show_default=False)] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="Continue RUN from its last checkpoint.")] = None,
    from_run: Annotated[
        str | None, typer.Option("--from", help="Start a new run from RUN's config (+ overrides).")
    ] = None,
    skip_missing: Annotated[
        bool,
        typer.Option(
            "--skip-missing-checkpoints",
            help="With --resume: when the newest checkpoint's files are gone, resume from the newest one whose files "
            "exist (the steps after it are run again).",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the resolved config, sizes and a memory estimate; run nothing.")
    ] = False,
    db: DbOption = None,
) -> None:
    from grpoctl import config as C

    config_path, overrides = split_args(args or [])
    for flag, ref in (("--resume", resume), ("--from", from_run)):
        if ref is not None and not ref.strip():
            raise UserError(f"{flag} needs a run id or name")
    if resume is not None and (config_path or overrides or from_run is not None):
        raise UserError("--resume continues a run exactly as configured: it takes no config file, overrides or --from")
    if from_run is not None and config_path:
        raise UserError("--from takes overrides only (the config comes from the run)")
    if skip_missing and resume is None:
        raise UserError("--skip-missing-checkpoints goes with --resume RUN")
    check_claim_timings()  # $GRPOCTL_LEASE_S and $GRPOCTL_HEARTBEAT_S, before anything is written
    # A fresh run's config is checked before the registry is even opened: bad input writes nothing.
    fresh = resume is None and from_run is None
    cfg = C.load_config(config_path or C.DEFAULT_CONFIG, overrides) if fresh else None
    if dry_run:
        from grpoctl.train.dry_run import describe_dry_run

        if cfg is None:  # the run's own config (and --from's overrides), read without writing
            from grpoctl.registry import Registry

            with Registry(db, must_exist=True, readonly=True) as registry:
                source = registry.get_run(resume or from_run)
            cfg = C.from_dict(json.loads(source.config)) if resume is not None else _config_from(source, overrides)
        typer.echo(describe_dry_run(cfg))
        return

    if cfg is not None:
        status = _start_fresh(cfg, db)
    elif resume is not None:
        status = _resume(resume, skip_missing, db)
    else:
        status = _start_from(from_run, overrides, db)
    raise typer.Exit(0 if status == "finished" else 1)


def _start_fresh(cfg, db: str | None) -> str:
    # Everything that can be wrong (device, model, data, template, output directories)
    # is checked before the registry is opened, since opening it creates a file.
    from grpoctl.registry import Registry

    Registry.check(db, write=True)  # creates nothing: the registry is opened just below
    data = _preflight(cfg)
    registry = Registry(db)
    if cfg.name:
        _check_name_free(registry, cfg.name)
    _setup_logging()
    _setup_threads(cfg)
    from grpoctl.train import trainer  # heavy: torch, transformers

    return trainer.start(cfg, registry, say=typer.echo, data=data)


def _resume(ref: str, skip_missing: bool, db: str | None) -> str:
    from grpoctl import config as C
    from grpoctl.registry import Registry
    from grpoctl.train.checkpoint import pick_resume_checkpoint
    from grpoctl.train.setup import check_model_dir, check_writable

    registry = Registry(db, must_exist=True)
    run = registry.get_run(ref)
    _check_resumable(registry, run)
    cfg = C.from_dict(json.loads(run.config))
    # A checkpoint whose files are gone is refused here, before anything about the run changes.
    checkpoint, skipped = pick_resume_checkpoint(registry.checkpoints(run.id), run.name, skip_missing)
    check_model_dir(checkpoint.path, cfg)
    if run.output_dir:
        check_writable(run.output_dir, f"run {run.name}'s checkpoint directory")
    # The KL reference is the initial model; the tokenizer is the checkpoint's.
    data = _preflight(cfg, need_model=cfg.loss.kl_beta > 0, model_source=checkpoint.path)
    for step, why in skipped:
        typer.echo(f"note: skipping the step-{step} checkpoint ({why})", err=True)
    _setup_logging()
    _setup_threads(cfg)
    from grpoctl.train import trainer

    return trainer.resume(cfg, registry, run, say=typer.echo, checkpoint=checkpoint, data=data)


def _start_from(ref: str, overrides: list[str], db: str | None) -> str:
    from grpoctl.registry import Registry

    registry = Registry(db, must_exist=True)
    source = registry.get_run(ref)
    cfg = _config_from(source, overrides)
    if cfg.name:
        _check_name_free(registry, cfg.name)
    data = _preflight(cfg)
    _setup_logging()
    _setup_threads(cfg)
    from grpoctl.train import trainer

    return trainer.start(cfg, registry, parent=source.name, say=typer.echo, data=data)


def _config_from(source, overrides: list[str]):
    """A new run's config for `--from RUN`: RUN's, unnamed, with `overrides` on top."""
    from grpoctl import config as C

    base = json.loads(source.config)
    base["name"] = None
    return C.apply_overrides(C.from_dict(base), overrides)


def _warn(message: str) -> None:
    typer.echo(message, err=True)


def _preflight(cfg, **kw):
    from grpoctl.threads import wait_passively

    wait_passively()  # OpenMP reads it once, when torch is imported (by setup, just below)
    from grpoctl.train.setup import preflight  # torch: only once the flags and config are known good

    return preflight(cfg, warn=_warn, **kw)


def _check_name_free(registry, name: str) -> None:
    try:
        existing = registry.get_run(name)
    except UserError:
        return
    if existing.name == name:
        raise UserError(f"a run named '{name}' already exists (use --resume {name}, or another name=)")


def _check_resumable(registry, run) -> None:
    """Refuse early what the claim would refuse later (after loading the model); the
    claim itself (trainer.resume) is what makes two resumers racing end with one."""
    from grpoctl.registry.claims import claim_refusal

    if run.status == "finished":
        raise UserError(f"run '{run.name}' already finished")
    refusal = claim_refusal(run)
    if refusal:
        raise UserError(refusal)


def evaluate_checkpoint(
    ckpt_dir: Annotated[
        str,
        typer.Argument(
            metavar="CKPT_DIR",
            help="A Hugging Face model directory, or a LoRA checkpoint (its adapter and the base it names).",
        ),
    ],
    subset: Annotated[
        int | None,
        typer.Option(
            help="How many eval problems, deterministic by --seed [default: the run's eval.subset, else 1024].",
            show_default=False,
        ),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(help="Eval jsonl (MATH or GSM8K shape); default: the run's eval data (its headline eval set)."),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            help="Its format (data.eval_source): math | gsm8k | jsonl | synthetic; default: guessed from --data."
        ),
    ] = None,
    prompt: Annotated[
        str | None, typer.Option(help="r1_zero | question_only | r1_zero_compact (or a template file).")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of the subset choice [default: the run's, else 0].", show_default=False)
    ] = None,
    greedy: Annotated[
        bool | None, typer.Option("--greedy/--sample", help="Decoding; default: the run's eval setting.")
    ] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Max new tokens; default: the run's.")] = None,
    samples: Annotated[
        int | None,
        typer.Option(
            help="Sample N completions per problem (eval.sampled.temperature) and record pass@k and maj@k "
            "instead of the headline accuracy.",
            show_default=False,
        ),
    ] = None,
    k: Annotated[
        str | None, typer.Option(help="With --samples: the ks of pass@k and maj@k, e.g. 1,4,16 [default: 1 and N].")
    ] = None,
    db: DbOption = None,
) -> None:
    for flag, value in (("--subset", subset), ("--max-tokens", max_tokens), ("--samples", samples)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    flags = EvalFlags(subset, data, source, prompt, seed, greedy, max_tokens, samples, tuple(_parse_ks(k, samples)))
    from grpoctl.train.lora import ADAPTER_CONFIG  # a LoRA checkpoint: the adapter, and the base it names

    path = Path(ckpt_dir)
    if not (path / "config.json").is_file() and not (path / ADAPTER_CONFIG).is_file():
        raise UserError(f"{ckpt_dir} is not a model directory (no config.json)")
    from grpoctl.registry import Registry
    from grpoctl.threads import wait_passively

    wait_passively()  # before torch's first import, just below
    from grpoctl.train.checkpoint import run_of_checkpoint  # noqa: E402  (torch only past the flags)
    from grpoctl.train.setup import check_model_dir

    check_model_dir(path)
    marker = run_of_checkpoint(path)
    Registry.check(db, write=True)
    registry, run = _registry_of(db, marker)
    cfg = checkpoint_eval_config(path, json.loads(run.config) if run else {}, flags)
    check_model_dir(path, cfg)
    eval_data = _preflight(cfg, need_model=False, need_train=False, writes=False)
    if not run and not (prompt and max_tokens):
        typer.echo(
            f"note: no grpoctl run wrote {ckpt_dir}; using the defaults for what is not given "
            "(--prompt r1_zero_compact, --max-tokens 32: the tiny model's)",
            err=True,
        )
    _setup_logging()
    _setup_threads(cfg)
    from grpoctl.train.evaluate_checkpoint import run_eval

    result = run_eval(cfg, registry or Registry(db), path, run, marker, say=typer.echo, data=eval_data)
    recorded = f" → recorded for run {run.name}" if run else " → recorded (no run known for this checkpoint)"
    if result.kind == "sampled":
        scores = json.loads(result.scores)
        shown = ", ".join(f"{name.split('/', 1)[1]} {value:.4f}" for name, value in scores.items() if "@" in name)
        typer.echo(f"{shown} (n={result.n} problems x {samples} samples){recorded}")
    else:
        typer.echo(
            f"accuracy {result.accuracy:.4f} (n={result.n}), format rate {result.format_rate:.3f}, "
            f"mean response length {result.mean_response_length:.1f}{recorded}"
        )


def _parse_ks(text: str | None, samples: int | None) -> list[int]:
    """--k 1,4,16: each k a whole number from 1 to --samples; none given: 1 and --samples."""
    if samples is None:
        if text is not None:
            raise UserError("--k needs --samples N (the samples per problem it draws from)")
        return []
    if text is None:
        return sorted({1, samples})
    try:
        ks = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise UserError(f"--k must be whole numbers separated by commas, e.g. 1,4,16; got {text!r}") from None
    if not ks or ks[0] < 1 or ks[-1] > samples:
        raise UserError(f"--k values must be between 1 and --samples ({samples}), got {text}")
    return ks


def _registry_of(db: str | None, marker: dict | None):
    """(registry, run) for a checkpoint's marker, read without creating a registry: a
    checkpoint no registry here knows is evaluated with the defaults."""
    if not marker:
        return None, None
    from grpoctl.registry import Registry

    try:
        registry = Registry(db, must_exist=True)
    except UserError:  # no registry yet
        return None, None
    try:
        return registry, registry.get_run(marker["run"])
    except UserError:
        return registry, None
