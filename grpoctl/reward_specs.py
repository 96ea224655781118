"""What `prompt.reward` and `reward.components` name: a built-in reward or a plugin.

A reward is named by a spec:

- a built-in reward's name: `r1_zero`, `question_only` (grpoctl/rewards/formats.py);
- a plugin in an importable module: `package.module:function`;
- a plugin in a file: `path/to/file.py:function` (relative to the working directory).

A plugin is called as `function(response, truth, example)`: the completion's text, the
ground-truth answer, and the problem's record as a dict (id, question, answer, solution,
level, subject, and the record's other short fields). It returns a float, or a dict of
named components (floats): the dict's reward is its `reward` entry when it has one, else
the sum of its entries.

`reward.components` combines several specs with weights: the run's reward is their
weighted sum, and each is recorded per step as `train/reward/<name>`.

Light on purpose (no torch, no math-verify): the config checks and the run identity use
it. Calling a plugin in the trainer, in a time-bounded worker process, is
grpoctl/rewards/plugins.py.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

# A plugin's file or module could not be read: its identity says so instead of a digest.
MISSING = "missing"


class PluginError(ValueError):
    """A spec that does not resolve to a callable; the message is one line."""


@dataclass(frozen=True)
class Component:
    """One reward of a run, with its weight; `name` None for prompt.reward alone, whose
    value is train/reward itself."""

    name: str | None
    spec: str
    weight: float = 1.0


def is_plugin(spec: str) -> bool:
    """A plugin spec (`module:function`, `file.py:function`), not a built-in reward's name."""
    return ":" in spec


def _split(spec: str) -> tuple[str, str, bool]:
    """(file or module, function, is a file)."""
    target, _, function = spec.rpartition(":")
    is_file = target.endswith(".py") or "/" in target or os.sep in target
    return target, function, is_file


def plugin_file(spec: str) -> Path | None:
    """The file whose bytes are the plugin's identity: the file itself, or the module's
    source (found without running the module); None when there is none to be found."""
    target, _, is_file = _split(spec)
    if is_file:
        path = Path(target)
        return path if path.is_file() else None
    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin or not os.path.isfile(found.origin):
        return None
    return Path(found.origin)


def plugin_digest(spec: str) -> str:
    """sha256 of the plugin's file bytes (MISSING when it cannot be read)."""
    path = plugin_file(spec)
    if path is None:
        return MISSING
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return MISSING


def absolute_spec(spec: str) -> str:
    """A file plugin's spec with its path made absolute, when the file exists from here
    (a sweep sends its runs' configs to other directories and machines)."""
    if not is_plugin(spec):
        return spec
    target, function, is_file = _split(spec)
    if not is_file or os.path.isabs(target) or not os.path.isfile(target):
        return spec
    return f"{os.path.abspath(target)}:{function}"


# Loaded files by (absolute path, size, mtime): config checks run once per sweep variant.
_loaded: dict[tuple[str, int, int], ModuleType] = {}


def _load_file(path: str) -> ModuleType:
    stat = os.stat(path)
    key = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns)
    if key not in _loaded:
        name = "grpoctl_reward_plugin_" + hashlib.sha256(key[0].encode()).hexdigest()[:12]
        found = importlib.util.spec_from_file_location(name, key[0])
        if found is None or found.loader is None:
            raise PluginError(f"{path} cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module  # dataclasses and pickling look modules up here
        try:
            found.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        _loaded[key] = module
    return _loaded[key]


def load_function(spec: str) -> Callable[..., Any]:
    """The plugin's function, imported (running its module); PluginError in one line when
    the file is missing, the module does not import, or the name is not a function.

    No bytecode is written beside the plugin (a refused config writes nothing)."""
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        return _load_function(spec)
    finally:
        sys.dont_write_bytecode = saved


def _load_function(spec: str) -> Callable[..., Any]:
    target, function, is_file = _split(spec)
    if not function.isidentifier():
        raise PluginError(f"{spec!r} does not end in ':function' (a Python name)")
    if is_file:
        if not os.path.isfile(target):
            raise PluginError(f"no file at {target}")
        what = target
        try:
            module = _load_file(target)
        except PluginError:
            raise
        except BaseException as exc:  # SystemExit, a syntax error: the module's problem, in one line
            raise PluginError(f"{target} fails to import: {one_line(exc)}") from None
    else:
        if not all(part.isidentifier() for part in target.split(".")):
            raise PluginError(f"{spec!r} is neither package.module:function nor path/to/file.py:function")
        what = f"module {target}"
        try:
            module = importlib.import_module(target)
        except BaseException as exc:
            raise PluginError(f"module {target} cannot be imported: {one_line(exc)}") from None
    fn = getattr(module, function, None)
    if fn is None:
        raise PluginError(f"{what} has no function {function!r}")
    if not callable(fn):
        raise PluginError(f"{what}: {function} is not callable ({type(fn).__name__})")
    return fn


def one_line(exc: BaseException) -> str:
    """An exception as `Type: its first line`, for a one-line error."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def components_of(prompt_reward: str, components: Any) -> list[Component]:
    """The rewards a run sums: reward.components (a list of {name, spec, weight}), or
    prompt.reward alone at weight 1 when there are none."""
    if not components:
        return [Component(None, prompt_reward, 1.0)]
    return [Component(str(c["name"]), str(c["spec"]), float(c.get("weight", 1.0))) for c in components]


def plugin_specs(config: Mapping) -> list[str]:
    """The plugin specs a resolved config (plain nested dicts) uses, in order, once each."""
    prompt = config.get("prompt") or {}
    reward = config.get("reward") or {}
    specs = [c.spec for c in components_of(str(prompt.get("reward", "")), reward.get("components") or [])]
    return list(dict.fromkeys(s for s in specs if is_plugin(s)))


def plugin_identity(config: Mapping) -> dict[str, str]:
    """{spec: sha256 of its file} for each plugin the config uses; empty without plugins."""
    return {spec: plugin_digest(spec) for spec in plugin_specs(config)}
