"""The bad-input corpus: every case is refused with one line on stderr, exit code 2, no
traceback, and nothing written (the registry and outputs/ byte for byte as before, or absent).

Cases run in-process through `grpoctl.cli.main` in a fresh working directory, which keeps
the whole corpus to seconds; `test_in_process_harness_matches_a_real_process` runs a sample
of them as real `python -m grpoctl` processes and checks that both ways agree. With
`GRPOCTL_BAD_INPUTS_SUBPROCESS=1` every case runs as a real process (minutes, not seconds).

Categories: config, data, eval, sweep, yaml, run_ids. Registry failures (a directory as
--db, a corrupt file, an unknown scheme, ...) have their own table in
tests/test_bad_registry.py; a case added to CASES with category "registry" runs here too.

Each train case starts from FAST (a random tiny model, one short step), so a case that is
not refused costs seconds rather than the default run's minutes; the bad value comes last
and wins.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, grpoctl_cmd

FAST = [
    "model.path={M}",
    "steps=1",
    "rollout.rollout_batch_size=8",
    "rollout.group_size=4",
    "loop.train_batch_size=8",
    "loop.gradient_accumulation_steps=1",
    "rollout.min_tokens=1",
    "rollout.max_tokens=4",
    "eval.max_tokens=4",
    "eval.subset=4",
    "eval.at_start=false",
    "runtime.threads=1",
    "logging.live=false",
    "checkpoint.dir=outputs/ckpt",
    "runtime.cache_dir=outputs/cache",
]
MATH = ["data.source=math", "data.train_path={A}/data/train.jsonl", "data.eval_path={A}/data/eval.jsonl"]


@dataclass
class Case:
    category: str
    id: str
    args: list[str]
    expect: str | None = None  # a fragment the one line must contain
    setup: Callable[[Path, Path], None] | None = None  # (cwd, assets) -> None
    new: bool = False  # exercises a flag or rule that did not exist before this corpus


CASES: list[Case] = []


def case(category, id, args, expect=None, setup=None, new=False):
    CASES.append(Case(category, id, list(args), expect, setup, new))


def train(*bad):
    return ["train", "addition", *FAST, *bad]


# --------------------------------------------------------------------------- config

for key, value, expect in [
    ("lr", "nan", "optimizer.lr"),
    ("lr", "inf", "optimizer.lr"),
    ("lr", "-inf", "optimizer.lr"),
    ("lr", "0", "optimizer.lr"),
    ("lr", "-1e-4", "optimizer.lr"),
    ("lr", "1e400", "optimizer.lr"),
    ("temperature", "nan", "rollout.temperature"),
    ("temperature", "inf", "rollout.temperature"),
    ("temperature", "0", "rollout.temperature"),
    ("rollout.top_p", "nan", "rollout.top_p"),
    ("rollout.top_p", "1.5", "rollout.top_p"),
    ("cliprange", "nan", "loss.cliprange"),
    ("cliprange", "inf", "loss.cliprange"),
    ("cliprange", "0", "loss.cliprange"),
    ("cliprange", "1.0", "loss.cliprange"),
    ("cliprange", "1.5", "loss.cliprange"),
    ("loss.cliprange_high", "nan", "loss.cliprange_high"),
    ("loss.cliprange_high", "-0.1", "loss.cliprange_high"),
    ("kl_beta", "nan", "loss.kl_beta"),
    ("kl_beta", "inf", "loss.kl_beta"),
    ("kl_beta", "-0.1", "loss.kl_beta"),
    ("optimizer.betas", "[0.9,1.0]", "optimizer.betas"),
    ("optimizer.betas", "[1.5,0.9]", "optimizer.betas"),
    ("optimizer.betas", "[-0.1,0.95]", "optimizer.betas"),
    ("optimizer.betas", "[0.9]", "optimizer.betas"),
    ("optimizer.betas", "[0.9,.nan]", "optimizer.betas"),
    ("optimizer.max_grad_norm", "-1", "optimizer.max_grad_norm"),
    ("optimizer.max_grad_norm", "0", "optimizer.max_grad_norm"),
    ("optimizer.max_grad_norm", "nan", "optimizer.max_grad_norm"),
    ("advantage_eps", "-1e-6", "loss.advantage_eps"),
    ("advantage_eps", "nan", "loss.advantage_eps"),
    ("optimizer.warmup_steps", "-1", "optimizer.warmup_steps"),
    ("optimizer.min_lr_ratio", "-0.1", "optimizer.min_lr_ratio"),
    ("optimizer.min_lr_ratio", "1.5", "optimizer.min_lr_ratio"),
    ("optimizer.weight_decay", "-0.01", "optimizer.weight_decay"),
    ("optimizer.weight_decay", "nan", "optimizer.weight_decay"),
    ("eval.every", "-1", "eval.every"),
    ("runtime.threads", "-1", "runtime.threads"),
    ("data.train_size", "-5", "data.train_size"),
    ("data.train_size", "0", "data.train_size"),
    ("data.synthetic.min_digits", "0", "data.synthetic.min_digits"),
    ("data.synthetic.num_operands", "1", "data.synthetic.num_operands"),
    ("data.synthetic.ops", "[/]", "data.synthetic.ops"),
    ("data.synthetic.ops", "[]", "data.synthetic.ops"),
    ("seed", "-1", "seed"),
    ("seed", "18446744073709551616", "seed"),
    ("model.warmstart.lr", "nan", "model.warmstart.lr"),
    ("model.warmstart.steps", "0", "model.warmstart.steps"),
    ("model.warmstart.target_accuracy", "1.5", "model.warmstart.target_accuracy"),
    ("model.warmstart.batch_size", "0", "model.warmstart.batch_size"),
    ("model.warmstart.check_every", "0", "model.warmstart.check_every"),
    ("model.warmstart.save_steps", "[0]", "model.warmstart.save_steps"),
    ("model.tiny.hidden_size", "0", "model.tiny.hidden_size"),
    ("rollout.vllm.gpu_memory_utilization", "0", "rollout.vllm.gpu_memory_utilization"),
    ("rollout.vllm.gpu_memory_utilization", "1.5", "rollout.vllm.gpu_memory_utilization"),
    ("rollout.vllm.sleep_level", "3", "rollout.vllm.sleep_level"),
    ("rollout.vllm.max_model_len", "0", "rollout.vllm.max_model_len"),
    ("rollout.vllm.cpu_kvcache_space_gb", "-1", "rollout.vllm.cpu_kvcache_space_gb"),
    ("eval.subset", "0", "eval.subset"),
    ("eval.batch_size", "0", "eval.batch_size"),
    ("eval.max_tokens", "0", "eval.max_tokens"),
    ("eval.temperature", "nan", "eval.temperature"),
    ("checkpoint.keep_last", "0", "checkpoint.keep_last"),
    ("checkpoint.every", "-1", "checkpoint.every"),
    ("checkpoint.keep_best", "-1", "checkpoint.keep_best"),
    ("logging.samples_per_step", "-1", "logging.samples_per_step"),
    ("rollout.generation_batch_size", "0", "rollout.generation_batch_size"),
    ("rollout.min_tokens", "-1", "rollout.min_tokens"),
    ("rollout.stop", '[""]', "rollout.stop"),
    ("model.path", '""', "model.path"),
]:
    case("config", f"{key}={value}", train(f"{key}={value}"), expect)

case("config", "eval-top_p-nan-sampled", train("eval.greedy=false", "eval.top_p=nan"), "eval.top_p")
case(
    "config", "max_digits<min_digits", train("data.synthetic.min_digits=3", "data.synthetic.max_digits=2"), "max_digits"
)
case("config", "tiny-heads-do-not-divide", train("model.tiny.num_attention_heads=3"), "num_attention_heads")
case(
    "config",
    "tiny-kv-heads-do-not-divide",
    train("model.tiny.num_key_value_heads=2", "model.tiny.num_attention_heads=1"),
    "num_key_value_heads",
)
case(
    "config", "gspo-with-reinforce", train("loss.importance_level=sequence", "loss=reinforce_with_baseline"), "sequence"
)
case("config", "gspo-with-no-baseline", train("loss.importance_level=sequence", "loss=no_baseline"), "sequence")
case("config", "device-cuda-without-cuda", train("runtime.device=cuda"), "cuda")
case("config", "tiny@150-not-saved", train("model.path=tiny@150"), "tiny@150")
case("config", "tiny@abc", train("model.path=tiny@abc"), "tiny@abc")
case("config", "model-path-missing", train("model.path={A}/no-such-model"), "model.path")
case("config", "model-dir-without-config", train("model.path={A}/adir"), "config.json")
case("config", "model-config-corrupt", train("model.path={A}/models/bad_config"), "config.json")
case("config", "model-weights-corrupt", train("model.path={A}/models/bad_weights"), "safetensors")
case("config", "max-tokens-past-positions", train("rollout.max_tokens=5000"), "positions")
case("config", "template-file-missing", train("prompt.template={A}/no.prompt"), "template")
case("config", "template-without-placeholder", train("prompt.template={A}/noplace.prompt"), "placeholder")
case("config", "checkpoint-dir-is-a-file", train("checkpoint.dir={A}/afile.txt"), "checkpoint.dir")
case("config", "checkpoint-dir-under-a-file", train("checkpoint.dir={A}/afile.txt/sub"), "checkpoint.dir")
case("config", "checkpoint-dir-read-only", train("checkpoint.dir={A}/readonly/ckpt"), "checkpoint.dir")
case("config", "cache-dir-is-a-file", train("model.path=tiny", "runtime.cache_dir={A}/afile.txt"), "runtime.cache_dir")


# Reward plugins (issue 23): a spec that does not resolve is refused before anything is
# written, the plugin's own file included (no __pycache__ beside it).
def _plugin(source: str) -> Callable[[Path, Path], None]:
    def setup(cwd: Path, assets: Path) -> None:
        (cwd / "my_reward.py").write_text(source)

    return setup


_ANSWER = "{name: answer, spec: r1_zero, weight: 1}"
case("config", "reward-plugin-file-missing", train("prompt.reward=rewards/nowhere.py:score"), "no file at", new=True)
case(
    "config",
    "reward-plugin-module-missing",
    train("prompt.reward=no_such_package.rewards:score"),
    "module no_such_package.rewards cannot be imported",
    new=True,
)
case(
    "config",
    "reward-plugin-no-function",
    train("prompt.reward=my_reward.py:score"),
    "has no function 'score'",
    setup=_plugin("def other(response, truth, example):\n    return 1.0\n"),
    new=True,
)
case(
    "config",
    "reward-plugin-not-callable",
    train("prompt.reward=my_reward.py:score"),
    "not callable",
    setup=_plugin("score = 3\n"),
    new=True,
)
case(
    "config",
    "reward-plugin-import-raises",
    train("prompt.reward=my_reward.py:score"),
    "fails to import: ModuleNotFoundError",
    setup=_plugin("import no_such_dependency\n\ndef score(response, truth, example):\n    return 1.0\n"),
    new=True,
)
case(
    "config",
    "reward-plugin-syntax-error",
    train("prompt.reward=my_reward.py:score"),
    "fails to import: SyntaxError",
    setup=_plugin("def score(response, truth, example)\n    return 1.0\n"),
    new=True,
)
case(
    "config",
    "reward-component-file-missing",
    train(f"reward.components=[{_ANSWER}, {{name: short, spec: rewards/nowhere.py:score, weight: 0.1}}]"),
    "reward.components[1].spec",
    new=True,
)
case(
    "config",
    "reward-component-duplicate-name",
    train(f"reward.components=[{_ANSWER}, {_ANSWER}]"),
    "two components named 'answer'",
    new=True,
)
case("config", "reward-component-not-a-mapping", train("reward.components=[r1_zero]"), "{name, spec, weight}", new=True)
case(
    "config",
    "reward-component-weight-nan",
    train("reward.components=[{name: answer, spec: r1_zero, weight: .nan}]"),
    "weight must be a finite number",
    new=True,
)
case(
    "config",
    "reward-plugin-beside-components",
    train("prompt.reward=my_reward.py:score", f"reward.components=[{_ANSWER}]"),
    "reward.components replaces prompt.reward",
    setup=_plugin("def score(response, truth, example):\n    return 1.0\n"),
    new=True,
)
case("config", "reward-timeout-0", train("reward.timeout_s=0"), "reward.timeout_s", new=True)

# --------------------------------------------------------------------------- data files

for name, expect in [
    ("missing", "no such file"),
    ("adir", "directory"),
    ("empty", "empty"),
    ("blank", "empty"),
    ("badjson", "invalid JSON"),
    ("list", "expected a JSON object"),
    ("noq", "missing key 'problem'"),
    ("noa", "missing key 'answer'"),
    ("dictans", "must be text"),
    ("badutf8", "UTF-8"),
    ("dupid", "duplicate id"),
    ("nested", ":1:"),
    ("deep", ":2:"),
    ("huge", "MB"),
    ("nan", "NaN"),
    ("infinity", "Infinity"),
]:
    path = "{A}/adir" if name == "adir" else f"{{A}}/data/{name}.jsonl"
    case("data", f"train-{name}", train(*MATH, f"data.train_path={path}"), expect)
case("data", "eval-badjson", train(*MATH, "data.eval_path={A}/data/badjson.jsonl"), "invalid JSON")
case("data", "eval-huge", train(*MATH, "data.eval_path={A}/data/huge.jsonl"), "MB")
case("data", "eval-path-missing", train("data.source=math", "data.train_path={A}/data/train.jsonl"), "eval_path")
case("data", "all-train-in-eval", train(*MATH, "data.eval_path={A}/data/train.jsonl"), "no training examples")
case(
    "data",
    "gsm8k-without-marker",
    train("data.source=gsm8k", "data.train_path={A}/data/nomarker.jsonl", "data.eval_path={A}/data/nomarker.jsonl"),
    "####",
)
case("data", "solution-without-boxed", train(*MATH, "data.answer_field=solution"), "solution")
case("data", "jsonl-question-field-absent", train(*MATH, "data.source=jsonl", "data.question_field=prompt"), "prompt")
case(
    "data",
    "hub-without-datasets",
    train("data.source=hub", "data.train_path=org/name", "data.eval_path=org/name"),
    "datasets",
)
case("data", "train-bool-answer", train(*MATH, "data.train_path={A}/data/boolans.jsonl"), "must be text")
case("data", "train-list-question", train(*MATH, "data.train_path={A}/data/listq.jsonl"), "must be text")
# Overlong prompts (issue 22): a file of only problems longer than the context is refused;
# one overlong problem among others is dropped, and the run trains (tests/test_prompt_length.py).
case(
    "data",
    "train-only-overlong",
    train(*MATH, "data.train_path={A}/data/overlong.jsonl"),
    "1 of 1 training problems have a prompt over",
    new=True,
)
case(
    "data",
    "eval-only-overlong",
    train(*MATH, "data.eval_path={A}/data/overlong.jsonl"),
    "1 of 1 eval problems have a prompt over",
    new=True,
)

# --------------------------------------------------------------------------- eval

for name, args, expect in [
    ("missing-dir", ["{A}/no-such-ckpt"], "not a model directory"),
    ("a-file", ["{A}/afile.txt"], "not a model directory"),
    ("no-config", ["{A}/adir"], "not a model directory"),
    ("corrupt-config", ["{A}/models/bad_config"], "config.json"),
    ("config-not-an-object", ["{A}/models/list_config"], "config.json"),
    ("corrupt-safetensors", ["{A}/models/bad_weights"], "safetensors"),
    ("truncated-safetensors", ["{A}/models/truncated_weights"], "safetensors"),
    ("no-weights", ["{A}/models/no_weights"], "weights"),
    ("no-tokenizer", ["{A}/models/no_tokenizer"], "tokenizer"),
    ("subset-0", ["{M}", "--subset", "0"], "--subset"),
    ("subset-negative", ["{M}", "--subset", "-3"], "--subset"),
    ("max-tokens-0", ["{M}", "--max-tokens", "0"], "--max-tokens"),
    ("max-tokens-negative", ["{M}", "--max-tokens", "-1"], "--max-tokens"),
    ("max-tokens-past-positions", ["{M}", "--max-tokens", "100000"], "positions"),
    ("data-missing", ["{M}", "--data", "{A}/data/missing.jsonl"], "no such file"),
    ("data-badjson", ["{M}", "--data", "{A}/data/badjson.jsonl"], "invalid JSON"),
    ("data-directory", ["{M}", "--data", "{A}/adir"], "directory"),
    ("data-nested", ["{M}", "--data", "{A}/data/nested.jsonl"], ":1:"),
    ("prompt-unknown", ["{M}", "--prompt", "nosuch"], "template"),
    ("source-unknown", ["{M}", "--source", "bogus"], "data.source"),
    ("subset-not-a-number", ["{M}", "--subset", "abc"], "--subset"),
    ("seed-not-a-number", ["{M}", "--seed", "x"], "--seed"),
    ("run-marker-corrupt", ["{A}/models/bad_marker"], "grpoctl_run.json"),
]:
    case("eval", name, ["eval", *args], expect)

# --------------------------------------------------------------------------- sweep values

SWEEP_FAST = [item for item in FAST if not item.startswith("steps=")]
for values, expect in [
    ("nan..1", "finite"),
    ("1e-4..inf", "finite"),
    ("1,nan", "finite"),
    ("nan", "finite"),
    ("inf", "finite"),
    ("-inf,1e-4", "finite"),
    ("1e400", "finite"),
    ("1e-4..1e400", "finite"),
    ("nan..nan", "finite"),
    ("1e-6..1e-4:nan", "integer"),
    ("1e-6..1e-4:0", "at least 2"),
    ("1e-6..1e-4:1", "at least 2"),
    ("..", "not a number"),
    ("1e-6..", "not a number"),
    ("..1", "not a number"),
    ("a..b", "not a number"),
    ("1,,2", "empty item"),
    ("1e-4,1e-4", "repeats"),
    ("", "empty"),
    ("0..1", "positive"),
    ("-1..1", "positive"),
    ("1e-4..1e-6", "upward"),
    ("0.1..0.1", "upward"),
    ("abc,def", "optimizer.lr"),
    ("1e-400,1e-4", "optimizer.lr"),
    ("0,1e-4", "optimizer.lr"),
]:
    case("sweep", f"lr={values}", ["sweep", "lr", "--values", values, "--dry-run", *SWEEP_FAST], expect)
case("sweep", "too-many-points", ["sweep", "lr", "--values", "1e-6..1e-4:100000", "--dry-run"], "points", new=True)
case("sweep", "nan-without-dry-run", ["sweep", "lr", "--values", "1e-4,nan", *SWEEP_FAST], "finite")
case("sweep", "cliprange-1", ["sweep", "cliprange", "--values", "0.2,1.0", *SWEEP_FAST], "loss.cliprange")
case("sweep", "unknown-param", ["sweep", "nope", "--values", "1,2", "--dry-run"], "unknown config key")
case("sweep", "no-values", ["sweep", "lr", "--dry-run"], "give the values")
case("sweep", "parallel-0", ["sweep", "lr", "--values", "1e-5,1e-4", "--parallel", "0"], "--parallel")
case("sweep", "seeds-not-integers", ["sweep", "lr", "--values", "1e-5,1e-4", "--seeds", "a,b", "--dry-run"], "seeds")
case("sweep", "seeds-repeated", ["sweep", "lr", "--values", "1e-5,1e-4", "--seeds", "1,1", "--dry-run"], "seeds")
case("sweep", "spec-missing", ["sweep", "{A}/no-spec.yaml", "--dry-run"], "no ablation spec")
case("sweep", "spec-not-a-mapping", ["sweep", "{A}/yaml/list.yaml", "--dry-run"], "mapping")
case("sweep", "spec-without-variants", ["sweep", "{A}/yaml/wrongtype.yaml", "--dry-run"], "variants")
case("sweep", "spec-variant-unknown-key", ["sweep", "{A}/yaml/spec_unknown.yaml", "--dry-run"], "unknown config key")
case("sweep", "spec-variant-nan", ["sweep", "{A}/yaml/spec_nan.yaml", "--dry-run"], "optimizer.lr")
# --seeds auto sizes a spec for its findings' declared effects (sweep/auto_seeds.py)
AUTO = ["--seeds", "auto", "--dry-run"]
case("sweep", "auto-without-finding", ["sweep", "{A}/yaml/spec_plain.yaml", *AUTO], "declares no finding", new=True)
case("sweep", "auto-no-effect", ["sweep", "{A}/yaml/spec_no_effect.yaml", *AUTO], "declares no finding", new=True)
case("sweep", "auto-param-sweep", ["sweep", "lr", "--values", "1e-5,1e-4", *AUTO], "SPEC.yaml", new=True)
case("sweep", "auto-max-below-pilot", ["sweep", "{A}/yaml/spec_plain.yaml", *AUTO, "--max-seeds", "2"], "--max-seeds")
case("sweep", "auto-pilot-1", ["sweep", "{A}/yaml/spec_plain.yaml", *AUTO, "--pilot-seeds", "1"], "--pilot-seeds")
case(
    "sweep", "auto-option-alone", ["sweep", "{A}/yaml/spec_plain.yaml", "--max-seeds", "5", "--dry-run"], "--seeds auto"
)

# --------------------------------------------------------------------------- yaml config files

for name, expect, new in [
    ("missing", "no config file", False),
    ("adir", "no config file", False),
    ("broken", "invalid yaml", False),
    ("tabs", "invalid yaml", False),
    ("list", "mapping", False),
    ("scalar", "mapping", False),
    ("ablation", "ablation spec", False),
    ("unknown", "loss.bogus", False),
    ("wrongtype", "optimizer.lr", False),
    ("section_scalar", "loss", False),
    ("dup", "duplicate", False),
    ("binary", "yaml", False),
    ("badutf8", "yaml", False),
    ("bomb", "yaml", False),
    ("pytag", "yaml", False),
    ("interp", "optimizer.lr", False),
    ("lr_nan", "optimizer.lr", False),
    ("top_unknown", "foo", False),
    ("section_list", "optimizer", False),
    ("stop_int", "rollout.stop", False),
    ("seed_float", "seed", False),
    ("deep", "yaml", False),
    ("json_lr0", "optimizer.lr", False),
    ("empty", "sets no config keys", True),
    ("comments_only", "sets no config keys", True),
    ("null", "sets no config keys", True),
]:
    case("yaml", name, ["train", f"{{A}}/yaml/{name}.yaml", *FAST], expect, new=new)

# --------------------------------------------------------------------------- run ids


def with_registry(cwd: Path, assets: Path) -> None:
    shutil.copy(assets / "registry.db", cwd / "registry.db")


case("run_ids", "resume-without-registry", ["train", "--resume", "nope"], "no registry")
case("run_ids", "name-dot-dot", train("name=.."), "not usable as a name")
case("run_ids", "name-with-terminal-escape", train("name=a\x1b[31mb"), "control character")
case("run_ids", "name-too-long", train("name=" + "x" * 300), "1-200 characters")
case("run_ids", "skip-missing-without-resume", train() + ["--skip-missing-checkpoints"], "goes with --resume", new=True)
case("run_ids", "from-without-registry", ["train", "--from", "nope"], "no registry")
for name, args, expect, new in [
    ("resume-unknown", ["train", "--resume", "nope"], "no run named 'nope'", False),
    ("resume-ambiguous-prefix", ["train", "--resume", "alpha"], "matches 2 runs", False),
    ("resume-finished", ["train", "--resume", "done"], "already finished", False),
    ("resume-live", ["train", "--resume", "live"], "is being written by", False),
    ("resume-no-checkpoint", ["train", "--resume", "nockpt"], "no checkpoint", False),
    ("resume-checkpoint-files-missing", ["train", "--resume", "gone"], "step 2", False),
    ("resume-files-missing-skip", ["train", "--resume", "gone", "--skip-missing-checkpoints"], "step 2", True),
    ("resume-empty-id", ["train", "--resume", ""], "needs a run id", False),
    ("from-empty-id", ["train", "--from", " "], "needs a run id", False),
    ("resume-unknown-number", ["train", "--resume", "99999"], "no run named '99999'", False),
    ("resume-like-wildcard", ["train", "--resume", "alpha%"], "no run named", False),
    ("resume-with-overrides", ["train", "--resume", "done", "lr=1"], "takes no config file", False),
    ("resume-and-from", ["train", "--resume", "done", "--from", "done"], "takes no config file", False),
    ("from-unknown", ["train", "--from", "nope"], "no run named 'nope'", False),
    (
        "from-with-config-file",
        ["train", "--from", "done", "{A}/yaml/json_lr0.yaml"],
        "--from takes overrides only",
        False,
    ),
    ("from-bad-override", ["train", "--from", "done", "lr=nan"], "optimizer.lr", False),
    ("from-name-taken", ["train", "--from", "done", "name=alpha-1"], "already exists", False),
    ("name-taken", train("name=done"), "already exists", False),
    ("runs-show-unknown", ["runs", "show", "nope"], "no run named", False),
    ("runs-samples-unknown", ["runs", "samples", "nope"], "no run named", False),
    ("runs-tag-unknown", ["runs", "tag", "nope", "x"], "no run named", False),
    ("runs-rm-unknown", ["runs", "rm", "nope", "--yes"], "no run named", False),
    ("compare-unknown", ["compare", "nope"], "nope", False),
    ("report-unknown", ["report", "nope"], "nope", False),
]:
    case("run_ids", name, args, expect, setup=with_registry, new=new)


# --------------------------------------------------------------------------- assets


def _write_jsonl(path: Path, rows) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def _make_read_only(path: Path) -> Callable[[], None]:
    """Make `path` unwritable even for root (the immutable flag), else by mode; returns the undo."""
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "+i", str(path)], check=True)
        return lambda: subprocess.run(["chattr", "-i", str(path)], check=True)
    path.chmod(0o555)
    return lambda: path.chmod(0o755)


def _build_assets(root: Path, model: Path) -> list[Callable[[], None]]:
    undo = []
    (root / "adir").mkdir()
    (root / "afile.txt").write_text("not a directory\n")
    data = root / "data"
    data.mkdir()
    _write_jsonl(data / "train.jsonl", [{"problem": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(20)])
    _write_jsonl(data / "eval.jsonl", [{"problem": f"What is {i}*3?", "answer": str(3 * i)} for i in range(12)])
    (data / "empty.jsonl").write_bytes(b"")
    (data / "blank.jsonl").write_text("\n  \n\n")
    _write_jsonl(data / "badjson.jsonl", [{"problem": "1+1", "answer": "2"}, '{"problem": "2+2", "answer": '])
    _write_jsonl(data / "list.jsonl", ["[1, 2]"])
    _write_jsonl(data / "noq.jsonl", [{"answer": "1"}])
    _write_jsonl(data / "noa.jsonl", [{"problem": "1+1"}])
    _write_jsonl(data / "dictans.jsonl", [{"problem": "1+1", "answer": {"x": 1}}])
    (data / "badutf8.jsonl").write_bytes(b'{"problem": "\xff\xfe", "answer": "1"}\n')
    _write_jsonl(
        data / "dupid.jsonl",
        [{"problem": "a", "answer": "1", "unique_id": "x"}, {"problem": "b", "answer": "2", "unique_id": "x"}],
    )
    (data / "nested.jsonl").write_text("[" * 1_000_000 + "\n")  # 1 MB of nesting
    (data / "deep.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n' + '{"a":' * 5000 + "1" + "}" * 5000 + "\n")
    (data / "huge.jsonl").write_text(json.dumps({"problem": "x" * 20_000_000, "answer": "1"}) + "\n")
    _write_jsonl(data / "nan.jsonl", ['{"problem": "1+1", "answer": NaN}'])
    _write_jsonl(data / "infinity.jsonl", ['{"problem": "1+1", "answer": Infinity}'])
    _write_jsonl(data / "boolans.jsonl", [{"problem": "1+1", "answer": True}])
    _write_jsonl(data / "listq.jsonl", [{"problem": [1, 2], "answer": "3"}])
    _write_jsonl(data / "nomarker.jsonl", [{"question": "q", "answer": "no marker here"}])
    # 1 M characters: under the 4 MB line cap, far over the tiny model's 1,024 positions
    _write_jsonl(data / "overlong.jsonl", [{"problem": "What is " + "1+" * 500_000 + "1?", "answer": "500001"}])

    models = root / "models"
    for name in (
        "bad_config",
        "list_config",
        "bad_weights",
        "truncated_weights",
        "no_weights",
        "no_tokenizer",
        "bad_marker",
    ):
        shutil.copytree(model, models / name)
    (models / "bad_config" / "config.json").write_text('{"model_type": "qwen2", ')
    (models / "list_config" / "config.json").write_text("[1, 2]")
    (models / "bad_weights" / "model.safetensors").write_bytes(os.urandom(4096))
    weights = (model / "model.safetensors").read_bytes()
    (models / "truncated_weights" / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (models / "no_weights" / "model.safetensors").unlink()
    for tokenizer_file in (models / "no_tokenizer").glob("tokenizer*"):
        tokenizer_file.unlink()
    for extra in ("special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json"):
        (models / "no_tokenizer" / extra).unlink(missing_ok=True)
    (models / "bad_marker" / "grpoctl_run.json").write_text("{not json")

    (root / "noplace.prompt").write_text("Answer this: no placeholder here")
    readonly = root / "readonly"
    readonly.mkdir()
    undo.append(_make_read_only(readonly))

    y = root / "yaml"
    y.mkdir()
    (y / "adir.yaml").mkdir()
    texts = {
        "broken": "loss: [unclosed\n",
        "tabs": "optimizer:\n\tlr: 1\n",
        "list": "- a\n- b\n",
        "scalar": "42\n",
        "ablation": "variants:\n  a: {lr: 1.0e-4}\n",
        "unknown": "loss:\n  bogus: 1\n",
        "wrongtype": "optimizer:\n  lr: fast\n",
        "section_scalar": "loss: 5\n",
        "dup": "seed: 1\nseed: 2\n",
        "pytag": "name: !!python/object/apply:os.system ['echo hi']\n",
        "interp": "optimizer:\n  lr: ${nope}\n",
        "lr_nan": "optimizer:\n  lr: .nan\n",
        "top_unknown": "foo: 1\n",
        "section_list": "optimizer: [1, 2]\n",
        "stop_int": "rollout:\n  stop: 5\n",
        "seed_float": "seed: 1.5\n",
        "deep": "a: " + "[" * 20000 + "\n",
        "json_lr0": '{"optimizer": {"lr": 0}}\n',
        "empty": "",
        "comments_only": "# nothing here\n\n# at all\n",
        "null": "~\n",
        "spec_unknown": "variants:\n  a: {nope: 1}\n",
        "spec_nan": "variants:\n  a: {lr: .nan}\n",
        "spec_plain": "baseline: a\nvariants:\n  a: {lr: 1.0e-4}\n  b: {lr: 3.0e-4}\n",
        "spec_no_effect": "baseline: a\nvariants:\n  a: {lr: 1.0e-4}\n  b: {lr: 3.0e-4}\nfindings:\n"
        "  - {id: f, claim: c, variant: b, measure: plateau, expect: lower, testable: {rule: mixed_groups_at_start, in: every_arm, at_least: 0.2}}\n",
    }
    for name, text in texts.items():
        (y / f"{name}.yaml").write_text(text)
    (y / "binary.yaml").write_bytes(bytes(range(256)) * 4)
    (y / "badutf8.yaml").write_bytes(b"name: \xff\xfe\n")
    bomb = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
    for i in range(1, 10):
        bomb += f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]\n"
    (y / "bomb.yaml").write_text(bomb + "name: *j\n")
    _build_registry(root / "registry.db", model)
    return undo


def _build_registry(path: Path, model: Path) -> None:
    """A registry with runs in the states the run-id cases need (written through the Registry API)."""
    from grpoctl.config import load_config, to_dict
    from grpoctl.registry import Registry

    cfg = load_config(None, [item.replace("{M}", str(model)) for item in FAST])
    registry = Registry(str(path))
    runs = {}
    for name in ("alpha-1", "alpha-2", "done", "nockpt", "gone", "live"):
        runs[name] = registry.create_run(
            name=name,
            config=to_dict(cfg),
            config_diff={},
            config_hash="x" * 16,
            seed=0,
            total_steps=1,
            output_dir=str(path.parent / "gone-ckpts" / name),
        )
    registry.set_status(runs["done"].id, "finished")
    for name in ("alpha-1", "alpha-2", "nockpt", "gone"):
        registry.set_status(runs[name].id, "interrupted", error="interrupted by the user (Ctrl-C)")
    registry.add_checkpoint(runs["gone"].id, 2, str(path.parent / "gone-ckpts" / "gone" / "step-2"))
    registry.set_status(runs["live"].id, "running", pid=os.getpid())
    registry.close()


@pytest.fixture(scope="session")
def assets(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("bad-input-assets")
    undo = _build_assets(root, tiny_model_dir)
    yield root
    for step in undo:
        step()


# --------------------------------------------------------------------------- harness


def snapshot(root: Path, by_content: bool = True) -> dict[str, object]:
    """Every file under root with the hash of its bytes (or, for the large shared inputs,
    its size and modification time). SQLite's shared-memory index (-shm) is not data, and
    an empty -wal holds no write, so both are left out."""
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        if path.is_dir():
            out[str(path.relative_to(root)) + "/"] = "dir"
            continue
        if path.name.endswith("-shm") or (path.name.endswith("-wal") and path.stat().st_size == 0):
            continue
        stat = path.stat()
        out[str(path.relative_to(root))] = (
            hashlib.sha256(path.read_bytes()).hexdigest() if by_content else (stat.st_size, stat.st_mtime_ns)
        )
    return out


def expand(args: list[str], assets: Path, model: Path) -> list[str]:
    return [a.replace("{A}", str(assets)).replace("{M}", str(model)) for a in args]


# A refusal takes well under a second of CPU; a case that is not refused would train (or
# build the default warm-start) in this process. The CPU-time timer is used because
# math-verify's grading resets the wall-clock one (signal.alarm).
CASE_CPU_LIMIT_S = 60.0


class RanInsteadOfRefusing(BaseException):
    pass


def _ran_away(signum, frame):
    raise RanInsteadOfRefusing(f"still running after {CASE_CPU_LIMIT_S:.0f} s of CPU: the input was not refused")


def run_in_process(args: list[str], cwd: Path) -> tuple[int, str]:
    """`grpoctl ARGS` through grpoctl.cli.main in this process: (exit code, stderr)."""
    from grpoctl import cli

    previous_alarm = signal.signal(signal.SIGPROF, _ran_away)
    signal.setitimer(signal.ITIMER_PROF, CASE_CPU_LIMIT_S)
    handlers = list(logging.root.handlers)
    argv, here = sys.argv, os.getcwd()
    err, out = io.StringIO(), io.StringIO()
    code = 0
    try:
        os.chdir(cwd)
        sys.argv = ["grpoctl", *args]
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                cli.main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # a traceback is what the user would have seen
                import traceback

                traceback.print_exc()
                code = 1
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous_alarm)
        sys.argv = argv
        os.chdir(here)
        logging.root.handlers[:] = handlers
    return code, err.getvalue()


# What conftest.py sets for the whole suite but a user's shell does not have: a real process
# runs without it, so a library's warning on stderr (transformers logs at warning level
# unless told otherwise) shows up here as the user would see it.
SUITE_ONLY_ENV = ("GRPOCTL_DB", "TRANSFORMERS_VERBOSITY")


def run_subprocess(args: list[str], cwd: Path, timeout: float = 120) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in SUITE_ONLY_ENV} | {"PYTHONPATH": str(REPO)}
    try:
        out = subprocess.run(grpoctl_cmd(*args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "timed out\n(ran instead of refusing)\n"
    return out.returncode, out.stderr


SUBPROCESS_ALL = os.environ.get("GRPOCTL_BAD_INPUTS_SUBPROCESS") == "1"


def check_case(c: Case, assets: Path, model: Path, workdir: Path, runner=None) -> tuple[int, str]:
    workdir.mkdir(parents=True, exist_ok=True)
    if c.setup:
        c.setup(workdir, assets)
    before, assets_before = snapshot(workdir), snapshot(assets, by_content=False)
    runner = runner or (run_subprocess if SUBPROCESS_ALL else run_in_process)
    code, stderr = runner(expand(c.args, assets, model), workdir)
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr, stderr[-3000:]
    assert code == 2, f"exit {code}: {stderr[-2000:]}"
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), lines[0]
    assert snapshot(workdir) == before, "the command wrote into its working directory"
    assert snapshot(assets, by_content=False) == assets_before, "the command wrote next to its inputs"
    if c.expect:
        assert c.expect.lower() in lines[0].lower(), lines[0]
    return code, lines[0]


@pytest.fixture(autouse=True)
def _no_ambient_registry(monkeypatch):
    monkeypatch.delenv("GRPOCTL_DB", raising=False)


@pytest.mark.parametrize("c", CASES, ids=[f"{c.category}:{c.id}" for c in CASES])
def test_bad_input_is_refused_in_one_line_and_writes_nothing(c, assets, tiny_model_dir, tmp_path):
    check_case(c, assets, tiny_model_dir, tmp_path / "cwd")


SUBPROCESS_SAMPLE = [
    "config:lr=nan",
    "config:model-weights-corrupt",
    "data:train-nested",
    # A real process's stderr also carries what libraries log (transformers' too-long
    # warning, when a prompt's length is measured), which the in-process harness misses.
    "data:train-only-overlong",
    "data:eval-only-overlong",
    "eval:subset-0",
    "sweep:lr=1,nan",
    "yaml:empty",
    "run_ids:resume-checkpoint-files-missing",
    "config:reward-plugin-import-raises",
]


@pytest.mark.slow
@pytest.mark.parametrize("case_id", SUBPROCESS_SAMPLE)
def test_in_process_harness_matches_a_real_process(case_id, assets, tiny_model_dir, tmp_path):
    c = next(c for c in CASES if f"{c.category}:{c.id}" == case_id)
    inside = check_case(c, assets, tiny_model_dir, tmp_path / "inside", runner=run_in_process)
    outside = check_case(c, assets, tiny_model_dir, tmp_path / "outside", runner=run_subprocess)
    assert inside == outside


def test_every_category_has_at_least_15_cases():
    counts = Counter(c.category for c in CASES)
    assert len(CASES) >= 150, counts
    for category in ("config", "data", "eval", "sweep", "yaml", "run_ids"):
        assert counts[category] >= 15, counts


# --------------------------------------------------------------------------- below the CLI


def _numeric_fields(cls, prefix: str = ""):
    """Dotted paths of every int/float (or list of them) field of the config dataclasses."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind, path = hints[f.name], f"{prefix}{f.name}"
        if dataclasses.is_dataclass(kind):
            yield from _numeric_fields(kind, path + ".")
            continue
        # int, float, `int | None` and `list[float]` alike: the number types among the arguments
        if kind in (int, float) or {int, float} & set(typing.get_args(kind)):
            yield path


def test_every_numeric_config_key_has_a_range():
    from grpoctl.config import Config
    from grpoctl.config_checks import RANGES

    numeric = set(_numeric_fields(Config))
    assert "optimizer.betas" in numeric and "data.train_size" in numeric and "seed" in numeric
    assert numeric - set(RANGES) == set(), "numeric keys without key(range=...) in config_schema/"
    assert set(RANGES) - numeric == set(), "ranges for keys that do not exist"


def _outside(rule) -> list:
    """Values just outside a rule's interval (and NaN/inf for floats)."""
    import math

    i = rule.interval
    values = []
    if math.isfinite(i.low):
        values.append(i.low - 1 if i.low_closed else i.low)
    if math.isfinite(i.high):
        values.append(i.high + 1 if i.high_closed else i.high)
    return values


@pytest.mark.slow
def test_each_range_refuses_nan_infinity_and_its_edges():
    """Every row of RANGES, driven from the table: the first values outside it are refused
    in one line that names the key; NaN and infinity wherever the key is a float."""
    from grpoctl.config import load_config, to_dict
    from grpoctl.config_checks import RANGES
    from grpoctl.errors import UserError

    defaults = to_dict(load_config())
    tried = 0
    for key, rule in RANGES.items():
        default = defaults
        for part in key.split("."):
            default = default[part]
        is_list = isinstance(default, list)
        sample = (default[0] if default else 1) if is_list else default
        is_float = isinstance(sample, float) or key in ("loss.cliprange_high",)
        bad = [v for v in _outside(rule) if is_float or float(v).is_integer()]
        bad = [int(v) if not is_float else float(v) for v in bad]
        if is_float:
            bad += [float("nan"), float("inf")]
        for value in bad:
            text = f"[{value}, {value}]" if is_list else repr(value).replace("nan", ".nan").replace("inf", ".inf")
            with pytest.raises(UserError) as info:
                load_config(None, [f"{key}={text}"])
            assert key in str(info.value) and "\n" not in str(info.value), (key, value, str(info.value))
            tried += 1
    assert tried >= len(RANGES) + 40  # (100 values for 53 keys when this was written)


def test_json_parser_memory_error_is_one_line(tmp_path, monkeypatch):
    """MemoryError cannot be provoked safely on a shared machine: the parser is made to raise it."""
    import grpoctl.data.files as files
    from grpoctl.data import DataError

    path = tmp_path / "x.jsonl"
    path.write_text('{"problem": "1+1", "answer": "2"}\n')

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(files.json, "loads", out_of_memory)
    with pytest.raises(DataError, match=r"x\.jsonl:1: invalid JSON \(too large to parse"):
        list(files.read_jsonl(path))


def test_line_limit_is_exact(tmp_path):
    from grpoctl.data import DataError
    from grpoctl.data.files import MAX_LINE_BYTES, read_jsonl

    record = '{"problem": "%s", "answer": "1"}'
    fits = tmp_path / "fits.jsonl"
    fits.write_text(record % ("x" * (MAX_LINE_BYTES - len(record % "") - 1)) + "\n")  # the newline counts
    assert len(list(read_jsonl(fits))) == 1
    over = tmp_path / "over.jsonl"
    over.write_text("\n" + record % ("x" * MAX_LINE_BYTES) + "\n")
    with pytest.raises(DataError, match=r"over\.jsonl:2: line longer than 4 MB"):
        list(read_jsonl(over))


def test_an_explicit_empty_mapping_is_no_changes(assets, tmp_path):
    from grpoctl.config import config_diff, load_config

    braces = tmp_path / "braces.yaml"
    braces.write_text("{}\n")
    assert config_diff(load_config(braces)) == {}


@pytest.mark.slow
def test_a_subset_larger_than_the_data_warns_in_one_line(assets, tiny_model_dir, tmp_path):
    """Not bad input: the eval runs on all 12 problems, and says so once."""
    args = [
        "eval",
        str(tiny_model_dir),
        "--data",
        str(assets / "data" / "eval.jsonl"),
        "--subset",
        "100",
        "--prompt",
        "r1_zero_compact",
        "--max-tokens",
        "4",
    ]
    code, stderr = run_subprocess(args, tmp_path)
    assert code == 0, stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: eval.subset=100 but the eval data has 12 problems: evaluating on all of them"]
    assert "Traceback" not in stderr
