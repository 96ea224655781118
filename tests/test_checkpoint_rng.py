"""Checkpoints keep the CUDA generators' states too, and older checkpoints still resume.

No GPU here: torch.cuda's generator functions are faked, as a CUDA machine with two
devices would answer them. tests/fixtures/checkpoint_v0 was written before CUDA states
were saved (and before TrainState existed); its state must still load and restore.
"""

from __future__ import annotations

import random
import shutil

import pytest
import torch
from conftest import REPO

from grpoctl.train.checkpoint import (
    STATE_FILE,
    SavedTrainer,
    capture_rng,
    load_trainer_state,
    restore_rng,
    save_checkpoint,
)
from grpoctl.train.state import TrainState

V0 = REPO / "tests" / "fixtures" / "checkpoint_v0" / "ckpt" / "stopped" / "step-2"


class FakeCuda:
    """Two CUDA devices, each with a generator state (a byte tensor, as torch's are)."""

    def __init__(self, monkeypatch, devices: int = 2):
        self.states = [torch.full((16,), 10 + i, dtype=torch.uint8) for i in range(devices)]
        self.devices = devices
        self.set: list[tuple[int, torch.Tensor]] = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: self.devices)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in self.states])
        monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: self.set.append((device, state)))


def test_a_checkpoint_written_before_cuda_states_still_restores(monkeypatch, tmp_path, caplog):
    fake = FakeCuda(monkeypatch)
    shutil.copytree(V0, tmp_path / "step-2")
    saved = load_trainer_state(tmp_path / "step-2")
    assert saved.state.step == 2 and "cuda" not in saved.rng
    with caplog.at_level("INFO", logger="grpoctl"):
        restore_rng(saved.rng)
    assert torch.equal(torch.get_rng_state(), saved.rng["torch"])
    assert random.getstate() == saved.rng["python"]
    assert fake.set == []  # the CUDA generators stay as seeded at the run's start
    assert "no CUDA generator state" in caplog.text


def test_cuda_states_go_into_the_checkpoint_and_come_back(monkeypatch, tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    fake = FakeCuda(monkeypatch)
    torch.manual_seed(5)
    rng = capture_rng()
    assert [s.tolist() for s in rng["cuda"]] == [s.tolist() for s in fake.states]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    saved = SavedTrainer(TrainState(step=3), optimizer={}, scheduler={}, rng=rng)
    path = save_checkpoint(tmp_path / "step-3", model, tokenizer, saved, "run")
    assert (path / STATE_FILE).is_file()

    fake.states = [torch.zeros(16, dtype=torch.uint8)] * 2  # the generators move on
    torch.rand(3)
    loaded = load_trainer_state(path)
    restore_rng(loaded.rng)
    assert [(device, state.tolist()) for device, state in fake.set] == [
        (0, [10] * 16),
        (1, [11] * 16),
    ]
    assert torch.equal(torch.get_rng_state(), rng["torch"])

    # Resumed on a machine with one device: that device gets its own state back.
    fake.set.clear()
    fake.devices = 1
    restore_rng(loaded.rng)
    assert [device for device, _ in fake.set] == [0]


def test_cuda_states_are_skipped_where_there_is_no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    called = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *a: called.append(a))
    rng = capture_rng()
    assert "cuda" not in rng
    restore_rng({**rng, "cuda": [torch.zeros(16, dtype=torch.uint8)]})  # written on a GPU, resumed on CPU
    assert called == []


@pytest.fixture(autouse=True)
def _keep_the_global_generators():
    """These tests set torch's and Python's generators: leave them as they were."""
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    yield
    torch.set_rng_state(torch_state)
    random.setstate(python_state)
