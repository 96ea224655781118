"""The whole configuration of a run: structured defaults + a yaml diff + dotted overrides.

The tree of keys, with each key's default and help, is config_schema/. This module
loads a run's config from it: defaults, then a yaml diff, then `key=value` overrides
(dotted paths or short ALIASES), validated (config_checks.py); and the sizes derived
from a config.

This module imports no torch: the sweep launcher and `--dry-run` resolve configs cheaply.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from grpoctl.config_checks import validate

# The tree (every key's type, default and help) is config_schema/; re-exported here.
from grpoctl.config_schema import (  # noqa: F401
    KEY_RULES,
    CheckpointConfig,
    Config,
    DataConfig,
    EvalConfig,
    LoggingConfig,
    LoopConfig,
    LossConfig,
    ModelConfig,
    OptimizerConfig,
    PromptConfig,
    RewardConfig,
    RolloutConfig,
    RuntimeConfig,
    SyntheticConfig,
    TinyModelConfig,
    VLLMConfig,
    WarmStartConfig,
)
from grpoctl.errors import UserError
from grpoctl.rules import is_off_policy, updates_per_grpo_step

# Short names accepted by `sweep` and on the command line (`lr=1e-5`): key(aliases=...).
ALIASES = {alias: k.path for k in KEY_RULES.values() for alias in k.aliases}


# --------------------------------------------------------------------------- loading


# --------------------------------------------------------------------------- built-in configs

# Configs a user can name instead of giving a file: `grpoctl train lab`. The schema's
# defaults (config_schema/) are the tiny addition task, and every yaml is a diff from
# them; "addition" names them. The lab's file lives in the package so that an installed
# grpoctl has it (experiments/lab.yaml links to it, for the lab's study specs).
BUILTIN_CONFIGS: dict[str, Path | None] = {
    "lab": Path(__file__).parent / "configs" / "lab.yaml",
    "lab-hard": Path(__file__).parent / "configs" / "lab-hard.yaml",  # issue 37: hard levels, groups of 32
    "addition": None,
}
# What `grpoctl train` runs without a config: the lab, whose GRPO has dynamics to watch
# (length, entropy and the share of groups with signal all move; docs/lab.md). Python
# callers of load_config(None) still get the schema's defaults.
DEFAULT_CONFIG = "lab"


def builtin_config(path: str | Path | None) -> tuple[bool, Path | None]:
    """(True, its file or None) if `path` names a built-in config, else (False, path).

    A file of that name in the working directory wins: a name is only a name when no
    file answers to it."""
    if isinstance(path, str) and path in BUILTIN_CONFIGS and not Path(path).is_file():
        return True, BUILTIN_CONFIGS[path]
    return False, None if path is None else Path(path)


@functools.cache
def _key_tree() -> dict:
    """The defaults as plain nested dicts: what resolve_key walks (building the structured
    config costs milliseconds, and a command line may carry dozens of overrides)."""
    return OmegaConf.to_container(OmegaConf.structured(Config))  # type: ignore[return-value]


def resolve_key(key: str) -> str:
    """Map a short alias (`lr`) to its dotted path (`optimizer.lr`); check the path exists."""
    path = ALIASES.get(key, key)
    node: Any = _key_tree()
    seen: list[str] = []
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            where = ".".join(seen) or "the top level"
            valid = ", ".join(node.keys()) if isinstance(node, dict) else "none (not a section)"
            hint = " or a short alias (lr, loss, group_size, ...)" if not seen else ""
            raise UserError(f"unknown config key '{key}': valid keys at {where} are {valid}{hint}")
        node = node[part]
        seen.append(part)
    return path


def _parse_override(item: str) -> tuple[str, Any]:
    if "=" not in item:
        raise UserError(f"override '{item}' is not key=value")
    key, raw = item.split("=", 1)
    path = resolve_key(key.strip())
    return path, parse_value(raw)


def parse_value(raw: str) -> Any:
    """A config value as a user types it: `train` overrides and `sweep --values` items alike.

    YAML's reading, so `null` is None, `true` a bool, `[a, b]` a list and `{a: 1}` a dict;
    plus one correction: YAML reads `1e-5` (no dot) as a string, and a number is what users
    mean. Anything YAML cannot read stays the string typed.
    """
    import yaml

    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in "eE.") else int(value)
        except ValueError:
            return value
    return value


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """Defaults, then the yaml diff at `path` (a file, or a BUILTIN_CONFIGS name), then
    dotted `key=value` overrides; validated. `path=None` is the schema's defaults."""
    cfg = OmegaConf.structured(Config)
    _, file = builtin_config(path)
    if file is not None:
        try:
            cfg = OmegaConf.merge(cfg, _read_yaml(file))
        except OmegaConfBaseException as exc:
            raise UserError(_one_line(exc)) from None
    return apply_overrides(cfg, overrides)


def apply_overrides(cfg: DictConfig, overrides: list[str] | tuple[str, ...]) -> DictConfig:
    """Dotted `key=value` overrides on top of `cfg` (a copy), then validation."""
    cfg = cfg.copy()
    try:
        for item in overrides:
            key, value = _parse_override(item)
            OmegaConf.update(cfg, key, value, merge=False)
        OmegaConf.resolve(cfg)  # a yaml's ${...} interpolations: a bad one fails here, in one line
    except OmegaConfBaseException as exc:
        raise UserError(_one_line(exc)) from None
    validate(cfg)
    return cfg


def from_dict(data: dict) -> DictConfig:
    """Rebuild a validated config from a stored resolved config (for --resume and --from)."""
    try:
        cfg = cast(DictConfig, OmegaConf.merge(OmegaConf.structured(Config), data))
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as exc:
        raise UserError(_one_line(exc)) from None
    validate(cfg)
    return cfg


def typed_config(cfg: DictConfig | Config) -> Config:
    """The validated config as the typed tree of config_schema.Config, a plain dataclass.

    A run's engine (train/, rollout/, data/) is handed this, converted once where the run is
    prepared, so the type gate checks every key it reads. The DictConfig stays where a run
    is recorded: its identity and diff are computed from it (run_identity.py)."""
    if isinstance(cfg, Config):
        return cfg
    return cast(Config, OmegaConf.to_object(cfg))


def _read_yaml(path: Path) -> DictConfig:
    if not path.is_file():
        names = ", ".join(BUILTIN_CONFIGS)
        raise UserError(f"no config file at {path} (or name a built-in config: {names})")
    import yaml

    try:
        data = OmegaConf.load(path)
    except yaml.MarkedYAMLError as exc:  # multi-line: keep what is wrong and where
        line = f":{exc.problem_mark.line + 1}" if exc.problem_mark is not None else ""
        raise UserError(f"{path}{line}: invalid yaml ({exc.problem or exc.context})") from None
    except OSError as exc:
        if "Invalid loaded object type" in str(exc):  # OmegaConf's word for a scalar document
            raise UserError(f"{path}: expected a mapping of config keys, got a single value") from None
        raise UserError(f"{path}: cannot read ({exc})") from None
    except Exception as exc:  # bad encodings, recursion in deeply nested documents, ...
        raise UserError(f"{path}: invalid yaml ({(str(exc).splitlines() or [type(exc).__name__])[0]})") from None
    if not isinstance(data, DictConfig):
        raise UserError(f"{path}: expected a mapping of config keys")
    if not data and _is_blank_yaml(path):
        # An empty file is far more often a mistake (a truncated write, the wrong file)
        # than a wish for the defaults, and a run on the wrong config costs hours; `{}`
        # says "no changes" on purpose.
        raise UserError(f"{path} sets no config keys: to run the defaults give no config file, or write {{}} in it")
    # Ablation specs (experiments/*-ablation.yaml) carry base/variants, not config keys.
    if "variants" in data:
        raise UserError(f"{path} is an ablation spec: run it with `grpoctl sweep {path}`")
    return data


def _is_blank_yaml(path: Path) -> bool:
    """Empty, only comments, or a null document (`~`): yaml reads all of them as None."""
    import yaml

    try:
        return yaml.safe_load(path.read_bytes()) is None
    except (yaml.YAMLError, OSError):
        return False


def _one_line(exc: OmegaConfBaseException) -> str:
    msg = str(exc).splitlines()[0]
    key = getattr(exc, "full_key", None)
    if "Key '" in msg and "not in" in msg and key:
        try:
            resolve_key(str(key))
        except UserError as named:
            return str(named)
    if key:
        return f"{key}: {msg}"
    return msg


# --------------------------------------------------------------------------- derived


def to_dict(cfg: DictConfig | object) -> dict:
    """A config, or a part of one, as plain nested dicts: from a DictConfig, or from the typed
    dataclasses that typed_config makes (their values are the same)."""
    node = cfg if isinstance(cfg, DictConfig) else OmegaConf.structured(cfg)
    return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]


def config_diff(cfg: DictConfig) -> dict:
    """The nested keys whose values differ from the defaults: what makes this run this run."""
    return _diff(to_dict(OmegaConf.structured(Config)), to_dict(cfg))


def _diff(default: dict, actual: dict) -> dict:
    out = {}
    for key, value in actual.items():
        base = default.get(key)
        if isinstance(value, dict) and isinstance(base, dict):
            sub = _diff(base, value)
            if sub:
                out[key] = sub
        elif value != base:
            out[key] = value
    return out


# A validated config as a run's parts before and after typed_config: the typed tree, or the
# DictConfig built from it. Attribute reads are the same, and the type gate checks them
# against Config either way (mypy checks a read on every member of the union).
RunConfig: TypeAlias = "Config | DictConfig"


@dataclass(frozen=True)
class DerivedSizes:
    prompts_per_rollout_batch: int
    microbatch_size: int
    optimizer_steps_per_grpo_step: int
    off_policy: bool


def derived_sizes(cfg: RunConfig) -> DerivedSizes:
    """The sizes that follow from a config. `cfg` is typed as the tree it was built from
    (a DictConfig of it reads the same), so the type gate checks every key read here."""
    r, loop = cfg.rollout, cfg.loop
    return DerivedSizes(
        prompts_per_rollout_batch=r.rollout_batch_size // r.group_size,
        microbatch_size=loop.train_batch_size // loop.gradient_accumulation_steps,
        optimizer_steps_per_grpo_step=updates_per_grpo_step(
            loop.epochs_per_rollout_batch, r.rollout_batch_size, loop.train_batch_size
        ),
        off_policy=is_off_policy(loop.epochs_per_rollout_batch, loop.train_batch_size, r.rollout_batch_size),
    )
