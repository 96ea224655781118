"""What a sweep asks for: value specs (`1e-6..1e-4`) and ablation files, as a plan of runs.

A plan is worked out completely before anything is launched or written: every variant's
config is resolved with `load_config` and hashed, so a typo in the fifth variant is
reported before the first one starts, and the registry knows each member by the hash of
what it computes (not by its name).

Each variant is a list of dotted `key=value` overrides on top of one base config file,
resolved here into the run's full config, with every path made absolute (PATH_KEYS), so
that it means the same files from any directory and on any machine that shares them.
That full config is what the run's trainer gets, as a yaml file:

    python -m grpoctl train outputs/sweeps/lr-sweep/lr-sweep-lr=3e-5-s0.yaml --db URL

and the plan's hash is that config's, so the planner and the trainer, wherever it runs,
cannot disagree about which config a run has.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from grpoctl.config import BUILTIN_CONFIGS, DEFAULT_CONFIG, load_config, parse_value, resolve_key, to_dict
from grpoctl.errors import UserError
from grpoctl.formatting import format_config_value
from grpoctl.reward_specs import absolute_spec
from grpoctl.rules import PLUGIN_KEYS
from grpoctl.run_identity import config_hash, flatten
from grpoctl.spec_file import read_spec

# --------------------------------------------------------------------------- value specs

# `a..b:n` makes one run per point: past this, the count is a typo, not a plan.
MAX_POINTS = 1000


def parse_values(spec: str) -> list[Any]:
    """`a..b` (the 1-3-10 log series), `a..b:n` (n log-spaced points) or `a,b,c`.

    Each item of `a,b,c` is read by the one value parser that `train` overrides use
    (`config.parse_value`): `null`, `true`, numbers, and lists in brackets (`[1,2],[3,4]`).
    """
    text = spec.strip()
    if not text:
        raise UserError("empty --values: give a..b, a..b:n or a,b,c")
    if ".." in text and not text.startswith(("[", "{")):
        return _parse_range(text)
    items = [item.strip() for item in _split_items(text, spec)]
    if any(item == "" for item in items):
        raise UserError(f"--values {spec!r} has an empty item")
    values = [parse_value(item) for item in items]
    for item, value in zip(items, values, strict=True):
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"--values {spec!r}: {item!r} is not a finite number")
    if len(set(map(repr, values))) != len(values):
        raise UserError(f"--values {spec!r} repeats a value")
    return values


def _split_items(text: str, spec: str) -> list[str]:
    """Split `a,b,c` at its top-level commas: `[1,2],[3,4]` is two items, not four."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth < 0:
                raise UserError(f"--values {spec!r}: a closing {char!r} has no opening one")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise UserError(f"--values {spec!r}: a bracket is not closed")
    return items + [text[start:]]


def _parse_range(spec: str) -> list[float | int]:
    body, _, count = spec.partition(":")
    lo_text, _, hi_text = body.partition("..")
    lo, hi = _bound(lo_text, spec), _bound(hi_text, spec)
    if lo <= 0 or hi <= 0:
        raise UserError(f"--values {spec!r}: a log-spaced range needs positive bounds")
    if lo >= hi:
        hint = f" (write {hi_text.strip()}..{lo_text.strip()})" if lo > hi else ""
        raise UserError(f"--values {spec!r}: the range must go upward{hint}")
    integers = _looks_int(lo_text) and _looks_int(hi_text)
    if count:
        try:
            n = int(count)
        except ValueError:
            raise UserError(f"--values {spec!r}: the point count after ':' must be an integer") from None
        if n < 2:
            raise UserError(f"--values {spec!r}: a range needs at least 2 points (use a single value instead)")
        if n > MAX_POINTS:
            raise UserError(f"--values {spec!r}: at most {MAX_POINTS} points (one run each)")
        values = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
        values = [_round(v, 3) for v in values]
    else:
        values = one_three_series(lo, hi)
    if integers:
        values = sorted({int(round(v)) for v in values})
    return values


def _bound(text: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"--values {spec!r}: {text.strip() or 'an empty bound'!r} is not a number") from None
    if not math.isfinite(value):
        raise UserError(f"--values {spec!r}: {text.strip()!r} is not a finite number")
    return value


def _looks_int(text: str) -> bool:
    return re.fullmatch(r"\s*\d+\s*", text) is not None


def one_three_series(lo: float, hi: float) -> list[float]:
    """lo, then the 1 and 3 of each decade strictly inside (lo, hi), then hi.

    1e-6..1e-4 -> 1e-6, 3e-6, 1e-5, 3e-5, 1e-4: the spacing learning-rate sweeps use,
    about half a decade per step.
    """
    values = [_round(lo)]
    decade = math.floor(math.log10(lo))
    while 10.0**decade <= hi:
        for mantissa in (1, 3):
            v = _round(mantissa * 10.0**decade)
            if lo < v < hi and not math.isclose(v, lo) and not math.isclose(v, hi):
                values.append(v)
        decade += 1
    values.append(_round(hi))
    return values


def _round(value: float, digits: int = 6) -> float:
    # 3 * 1e-6 is 3.0000000000000004e-06 in binary; the label and the config want 3e-06.
    return float(f"{value:.{digits}g}")


def label_value(value: Any) -> str:
    """How a value reads in a sweep's label or run name: 3e-5, 0.2, true, null."""
    return format_config_value(value, none="null")


def override_text(value: Any) -> str:
    """The right-hand side of `key=value` that reads back as `value`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and float(label_value(value)) == value:
        return label_value(value)  # 3e-5 reads better on a command line than 3e-05
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    text = str(value)
    # "true", "null", "1e-5" or "a: b" would read back as something else: quote them. The
    # test is the one value parser itself, so what is left bare is what reads back.
    return text if parse_value(text) == text else json.dumps(text)


def safe_name(text: str) -> str:
    """Keep run names usable as directory and log file names everywhere."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text).strip("_") or "run"


# --------------------------------------------------------------------------- paths

# Keys that name files or directories. Directories a run writes are made absolute
# always; files it reads only when they exist from here (else the value is a hub id, a
# packaged template's name or "tiny", and stays as written).
PATH_KEYS_WRITTEN = ("checkpoint.dir", "runtime.cache_dir")
PATH_KEYS_READ = ("model.path", "data.train_path", "data.eval_path", "prompt.template")


def absolute_paths(cfg) -> None:
    """Make the config's relative paths absolute, from the current directory, in place."""
    for key in PATH_KEYS_WRITTEN + PATH_KEYS_READ:
        value = OmegaConf.select(cfg, key)
        if not isinstance(value, str) or not value or os.path.isabs(value):
            continue
        if key in PATH_KEYS_READ and not os.path.exists(value):
            continue
        OmegaConf.update(cfg, key, os.path.abspath(value))
    # A reward, loss or advantage plugin's file, like the files a run reads (a module stays a module name).
    for key in ("prompt.reward", *PLUGIN_KEYS):
        OmegaConf.update(cfg, key, absolute_spec(OmegaConf.select(cfg, key)))
    for component in cfg.reward.components:
        component.spec = absolute_spec(component.spec)
    for entry in OmegaConf.select(cfg, "eval.sets") or []:  # each eval set's file, read alike
        value = entry.get("path") if isinstance(entry, DictConfig) else None
        if isinstance(value, str) and value and not os.path.isabs(value) and os.path.exists(value):
            entry["path"] = os.path.abspath(value)


# --------------------------------------------------------------------------- plans


@dataclass
class Variant:
    label: str  # "lr=3e-5" or "no_baseline"
    seed: int
    overrides: list[str]  # dotted key=value after the base config file
    config_hash: str
    run_name: str  # proposed; the launcher picks another if it is taken
    config: dict = field(default_factory=dict)  # resolved, paths absolute: what config_hash hashes


@dataclass
class SweepPlan:
    name: str
    kind: str  # "sweep" (one parameter) or "ablation" (named variants)
    base: str | None  # config file given to every run first (None: the defaults)
    variants: list[Variant] = field(default_factory=list)
    spec: dict = field(default_factory=dict)  # what was asked for, stored with the sweep
    baseline: str | None = None  # the label `compare` and `report` set every variant against

    def run_config(self, variant: Variant, run_name: str | None = None) -> dict:
        """The full config of this variant's run, as its trainer gets it (in a yaml file)."""
        config = json.loads(json.dumps(variant.config))  # a deep copy
        config["name"] = run_name or variant.run_name
        config["group"] = self.name
        config["variant"] = variant.label
        config["logging"]["live"] = False  # trainers write to logs; the sweep shows progress
        return config


def _expand(
    name: str,
    kind: str,
    base: str | None,
    spec: dict,
    labelled: list[tuple[str, list[str]]],
    seeds: list[int] | None,
    shared: list[str],
    baseline: str | None = None,
) -> SweepPlan:
    """Resolve and hash every (label, overrides) x seed; refuse duplicates. The baseline
    is `baseline`, else the variant that changes nothing of the `shared` config (if any);
    it is stored in the spec, so `compare` finds it in the registry."""
    plan = SweepPlan(name=name, kind=kind, base=base, spec=spec)
    seen: dict[str, str] = {}
    for label, overrides in labelled:
        for seed in seeds if seeds is not None else [None]:
            full = overrides + ([f"seed={seed}"] if seed is not None else [])
            try:
                cfg = load_config(base, full)
            except UserError as exc:
                raise UserError(f"variant '{label}': {exc}") from None
            absolute_paths(cfg)
            digest = config_hash(cfg)
            tag = f"{label} (seed {cfg.seed})"
            if digest in seen:
                raise UserError(f"variants {seen[digest]} and {tag} have the same config")
            seen[digest] = tag
            run_name = safe_name(f"{name}-{label}-s{cfg.seed}")
            plan.variants.append(Variant(label, int(cfg.seed), full, digest, run_name, to_dict(cfg)))
    plan.baseline = baseline if baseline is not None else _unchanged_variant(plan, shared)
    if plan.baseline is not None:
        spec["baseline"] = plan.baseline
    return plan


def _unchanged_variant(plan: SweepPlan, shared: list[str]) -> str | None:
    """The label of the variant whose config is the shared config itself: an ablation's
    `plain: {}`, or the value of a parameter sweep that the base config already has."""
    first = plan.variants[0]
    try:
        reference_cfg = load_config(plan.base, shared + [f"seed={first.seed}"])
        absolute_paths(reference_cfg)
        reference = config_hash(reference_cfg)
    except UserError:  # the shared config alone may not be a valid run; then none is unchanged
        return None
    return next((v.label for v in plan.variants if v.seed == first.seed and v.config_hash == reference), None)


def parse_seeds(text: str | list | int | None) -> list[int] | None:
    """`0,1,2`, a yaml list or one integer; None when not given."""
    if text is None:
        return None
    items = text if isinstance(text, list) else str(text).split(",")
    try:
        seeds = [int(str(s).strip()) for s in items]
    except ValueError:
        raise UserError(f"seeds must be integers like 0,1,2, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserError(f"seeds must be distinct integers like 0,1,2, got {text!r}")
    return seeds


def param_sweep(
    param: str,
    values: str,
    base: str | None = None,
    overrides: list[str] = (),
    seeds: str | None = None,
    name: str | None = None,
) -> SweepPlan:
    """`grpoctl sweep lr --values 1e-6..1e-4`: one variant per value (per seed), each on
    `base`, by default `grpoctl train`'s own (DEFAULT_CONFIG, the lab): a sweep run after
    a bare `train` varies the run it follows, and a one-value sweep's member is that run."""
    base = DEFAULT_CONFIG if base is None else base
    path = resolve_key(param)
    short = path.rsplit(".", 1)[-1] if param == path else param
    name = name or f"{short}-sweep"
    parsed = parse_values(values)
    labelled = [(f"{short}={label_value(v)}", list(overrides) + [f"{path}={override_text(v)}"]) for v in parsed]
    spec = {
        "param": path,
        "values": values,
        "parsed": parsed,
        "base": base,
        "overrides": list(overrides),
        "seeds": seeds,
    }
    return _expand(name, "sweep", base, spec, labelled, parse_seeds(seeds), list(overrides))


def describe_base(plan: SweepPlan) -> str:
    """The config a plan's variants build on, for `sweep --dry-run`: a built-in name, a
    file, or the schema's defaults (an ablation spec without a `base:`)."""
    if plan.base is None:
        return "the schema's defaults (the addition task; a spec without `base:`)"
    if plan.base in BUILTIN_CONFIGS and not Path(plan.base).is_file():
        default = ", the default, as `grpoctl train` without a config" if plan.base == DEFAULT_CONFIG else ""
        return f"{plan.base} (built in{default})"
    return plan.base


# --------------------------------------------------------------------------- ablation files

SPEC_KEYS = {"name", "base", "baseline", "common", "seeds", "variants", "description", "findings"}


def ablation(
    path: str | Path,
    overrides: list[str] = (),
    seeds: str | None = None,
    name: str | None = None,
    base: str | None = None,
) -> SweepPlan:
    """`grpoctl sweep experiments/NAME.yaml`: named variants, each a minimal diff.

        name: baseline-ablation          # default: the file's stem
        base: h100.yaml                  # relative to this file or the repo; or a mapping
        common: {loop.n_grpo_steps: 100} # applied to every variant
        steps: 100                       # any config key here joins `common`
        seeds: [0, 1]
        baseline: reinforce_with_baseline  # what compare/report set every variant against
        findings: [...]                  # the claims it tests (analysis/findings.py)
        variants:
          no_baseline: {loss.loss_type: no_baseline}
          reinforce_with_baseline: {loss: {loss_type: reinforce_with_baseline}}

    `overrides` (from the command line) apply to every variant, after `common`; `base`
    replaces the file's base (e.g. run the H100 study with rtx4090.yaml). Without a
    `baseline:` it is the variant that changes nothing (`plain: {}`), if there is one.
    """
    path = Path(path)
    data = read_spec(path)
    variants = data.get("variants")
    if not isinstance(variants, dict) or not variants:
        raise UserError(f"{path}: 'variants' must map each label to its config diff")

    base_file, base_overrides = _base(data.get("base"), path, base)
    common = dict(data.get("common") or {})
    for key, value in data.items():
        if key not in SPEC_KEYS:  # `steps: 100`, `lr: 3e-5`: shorthand for common keys
            common[key] = value
    shared = base_overrides + _diff_overrides(common, f"{path}: common") + list(overrides)

    labelled = []
    for label, diff in variants.items():
        if diff is not None and not isinstance(diff, dict):
            raise UserError(f"{path}: variant '{label}' must be a mapping of config keys")
        labelled.append((str(label), shared + _diff_overrides(diff or {}, f"{path}: variant '{label}'")))

    baseline = data.get("baseline")
    if baseline is not None and str(baseline) not in {str(label) for label in variants}:
        raise UserError(f"{path}: baseline {baseline!r} is not one of the variants: " + ", ".join(map(str, variants)))
    from grpoctl.analysis.findings import parse_findings  # the format and its checks live with the measures

    parse_findings(
        data.get("findings"),
        str(data.get("name") or path.stem),
        [str(label) for label in variants],
        None if baseline is None else str(baseline),
        str(path),
    )
    spec = {"file": str(path), **data, "overrides": list(overrides)}
    if base:
        spec["base"] = base
    return _expand(
        name or str(data.get("name") or path.stem),
        "ablation",
        base_file,
        spec,
        labelled,
        parse_seeds(seeds if seeds is not None else data.get("seeds")),
        shared,
        None if baseline is None else str(baseline),
    )


def _base(value: Any, spec_path: Path, replacement: str | None) -> tuple[str | None, list[str]]:
    """The base config file to pass to every run, or overrides for an inline base."""
    if replacement is not None:
        value = replacement
    if value is None:
        return None, []
    if isinstance(value, dict):
        return None, _diff_overrides(value, f"{spec_path}: base")
    for candidate in (spec_path.parent / str(value), Path(str(value))):
        if candidate.is_file():
            return str(candidate), []
    raise UserError(f"{spec_path}: base config {value!r} not found next to the spec or in the current directory")


def _diff_overrides(diff: dict, where: str) -> list[str]:
    """{'loss': {'loss_type': 'x'}, 'lr': 1e-5} -> ['loss.loss_type=x', 'optimizer.lr=1e-05']."""
    out: dict[str, str] = {}
    for key, value in flatten(diff).items():
        try:
            path = resolve_key(key)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None
        if path in out:
            raise UserError(f"{where}: {path} is set twice")
        out[path] = f"{path}={override_text(value)}"
    return list(out.values())
