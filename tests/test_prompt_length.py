"""The prompt-length policy (issue 22, grpoctl/data/prompt_length.py): a problem whose prompt
leaves no room for the response is dropped at load, counted, and recorded; a file of only
such problems is refused (the bad-input corpus has those cases)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import invoke
from conftest import fast_overrides

from grpoctl import metrics
from grpoctl.config import load_config
from grpoctl.data.examples import Example
from grpoctl.data.fingerprints import file_hash
from grpoctl.data.prompt_length import PromptBudget, drop_overlong, prompt_budget
from grpoctl.data.run_data import load_run_data
from grpoctl.errors import UserError
from grpoctl.prompts import format_prompt, load_template
from grpoctl.tiny.model import TINY_MAX_POSITIONS, build_tokenizer

TEMPLATE = load_template("r1_zero_compact")


def _write(path: Path, questions: list[str]) -> Path:
    path.write_text("".join(json.dumps({"problem": q, "answer": "1"}) + "\n" for q in questions))
    return path


def test_the_limit_is_the_context_minus_the_response_budget():
    budget = PromptBudget(build_tokenizer(), context=100, source="test")
    shell = len(format_prompt(TEMPLATE, ""))  # the template's own tokens (one per byte here)
    fits = Example("a", "x" * (100 - 20 - shell), "1")  # exactly at the limit for max_new=20
    over = Example("b", "x" * (100 - 20 - shell + 1), "1")
    kept, dropped = drop_overlong([fits, over, fits], TEMPLATE, budget, max_new_tokens=20)
    assert [ex.id for ex in kept] == ["a", "a"] and dropped == 1
    kept, dropped = drop_overlong([fits, over], TEMPLATE, budget, max_new_tokens=19)
    assert len(kept) == 2 and dropped == 0  # one token less to answer: both fit


def test_tokens_not_bytes_decide_for_a_tokenizer_with_merges():
    class TwoBytesPerToken:  # a stand-in for a BPE vocabulary: a prompt of n bytes is n/2 tokens
        def __call__(self, text, add_special_tokens=False, verbose=True):
            return type("Encoded", (), {"input_ids": list(range((len(text.encode()) + 1) // 2))})()

    budget = PromptBudget(TwoBytesPerToken(), context=200, source="test")
    long_in_bytes = Example("a", "y" * 250, "1")  # over 200 bytes, under 200 tokens
    kept, dropped = drop_overlong([long_in_bytes], TEMPLATE, budget, max_new_tokens=10)
    assert kept == [long_in_bytes] and dropped == 0


def test_the_context_is_the_models_or_vllms_if_smaller(tiny_model_dir):
    cfg = load_config(None, [])
    assert prompt_budget(cfg, "tiny").context == TINY_MAX_POSITIONS
    assert prompt_budget(cfg, str(tiny_model_dir)).context == TINY_MAX_POSITIONS  # read from config.json
    small = load_config(None, ["rollout.backend=vllm", "rollout.vllm.max_model_len=256"])
    budget = prompt_budget(small, str(tiny_model_dir))
    assert (budget.context, budget.source) == (256, "rollout.vllm.max_model_len")
    with pytest.raises(UserError, match="cannot load the tokenizer"):
        prompt_budget(cfg, str(tiny_model_dir.parent))  # a directory without a tokenizer


def test_overlong_problems_are_dropped_before_the_eval_subset_and_still_held_out(tmp_path):
    long_q = "What is " + "1+" * 600 + "1?"  # 1,200+ bytes: over the tiny model's 1,024 positions
    train = _write(tmp_path / "train.jsonl", [f"What is {i}+1?" for i in range(10)] + [long_q])
    evals = _write(tmp_path / "eval.jsonl", [f"What is {i}*2?" for i in range(6)] + [long_q])
    cfg = load_config(
        None,
        ["data.source=math", f"data.train_path={train}", f"data.eval_path={evals}", "eval.subset=100"],
    )
    heard = []
    data = load_run_data(cfg, warn=heard.append, budget=prompt_budget(cfg, "tiny"))
    assert (data.overlong_train_dropped, data.overlong_eval_dropped) == (1, 1)
    assert len(data.eval) == 6 and all(ex.question != long_q for ex in data.eval)
    assert len(data.train) == 10
    assert any("1 of 11 training problems have a prompt over 992 tokens" in line for line in heard), heard
    assert any("1 of 7 eval problems have a prompt over 992 tokens" in line for line in heard), heard
    # Without a budget nothing is dropped: the filter is the budget's, not the loader's.
    assert load_run_data(cfg).overlong_train_dropped == 0


@pytest.mark.slow  # a real (in-process) training step: ~10 s
def test_a_train_file_with_one_overlong_problem_trains_and_records_the_count(tmp_path, tiny_model_dir):
    # 1 M characters: under the 4 MB line cap. Without the policy the lean decoder's KV cache
    # for this prompt is gigabytes and the run dies in a traceback.
    huge = "What is " + "1+" * 500_000 + "1?"
    train = _write(tmp_path / "train.jsonl", [f"What is {i}+{i}?" for i in range(12)] + [huge])
    evals = _write(tmp_path / "eval.jsonl", [f"What is {i}*3?" for i in range(4)])
    args = fast_overrides(
        tiny_model_dir,
        tmp_path,
        **{
            "loop.n_grpo_steps": 1,
            "rollout.rollout_batch_size": 8,
            "loop.train_batch_size": 8,
            "eval.subset": 4,
            "eval.at_start": "false",
            "rollout.max_tokens": 4,
            "eval.max_tokens": 4,
            "data.source": "math",
            "data.train_path": train,
            "data.eval_path": evals,
        },
    )
    db = tmp_path / "registry.db"
    out = invoke("train", "addition", *args, f"--db={db}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "1 of 13 training problems have a prompt over 1,020 tokens" in out.stderr
    from grpoctl.registry import Registry

    with Registry(str(db), must_exist=True, readonly=True) as registry:
        run = registry.list_runs()[0]
        series = registry.metric_series(run.id, [metrics.OVERLONG_TRAIN_DROPPED])
    assert series == {metrics.OVERLONG_TRAIN_DROPPED: [(1, 1.0)]}
    # ... and with the run's data fingerprint: the hashes of both files, what was kept.
    assert json.loads(run.data_fingerprint) == {
        "train": {"hash": file_hash(train), "problems": 12, "overlong_dropped": 1},
        "eval": {"source": "math", "hash": file_hash(evals), "subset": 4, "overlong_dropped": 0},
    }
    shown = invoke("runs", "show", run.name, f"--db={db}", cwd=tmp_path)
    assert f"train {file_hash(train)} (12 problems, 1 dropped as overlong)" in shown.stdout


def test_a_huge_prompt_is_decided_on_a_prefix():
    """Tokenizing a 1 M-character problem whole leaves hundreds of MB of heap resident (it
    broke the CPU memory tracker's per-phase peaks in a later test); a prefix decides it."""
    seen = []

    class Counting:
        def __init__(self):
            self.inner = build_tokenizer()

        def __call__(self, text, add_special_tokens=False, verbose=True):
            seen.append(len(text))
            return self.inner(text, add_special_tokens=add_special_tokens, verbose=verbose)

    budget = PromptBudget(Counting(), context=1024, source="test")
    huge = Example("h", "1+" * 500_000, "1")
    assert drop_overlong([huge], TEMPLATE, budget, max_new_tokens=32) == ([], 1)
    assert max(seen) < 20_000
