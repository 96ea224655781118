"""What a person watching a run sees: the ETA counts the steps left, after a --resume too."""

from __future__ import annotations

from grpoctl.config import load_config
from grpoctl.train.progress import Progress, eta_seconds


def test_eta_counts_only_the_steps_left():
    assert eta_seconds([2.0, 4.0], step=10, total=100) == (3.0, 270.0)
    assert eta_seconds([2.0], step=100, total=100) == (2.0, 0.0)
    assert eta_seconds([], step=0, total=100) == (0.0, 0.0)


def test_after_a_resume_the_eta_is_for_the_remaining_steps(capsys):
    progress = Progress(load_config(None, ["loop.n_grpo_steps=100"]), live=False)
    with progress:
        progress.update(91, {"time/step": 2.0, "train/reward": 0.5}, 0.4)  # the first step after resuming at 90
        progress.update(92, {"time/step": 2.0}, 0.4)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("step 91/100  reward 0.500  eval 0.400")
    assert "2.00 s/step  eta 00:18" in lines[0]  # 9 steps left, not 99
    assert "eta 00:16" in lines[1]


def test_a_long_eta_shows_hours():
    progress = Progress(load_config(None, ["loop.n_grpo_steps=5000"]), live=False)
    progress.update(1, {"time/step": 10.0}, None)
    assert "eta 13:53:10" in progress._line(1, {}, None)  # 4,999 steps x 10 s
