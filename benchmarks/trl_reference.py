"""Reference values for grpoctl's CISPO loss and RLOO / batch-std advantages, computed by TRL's own code.

Run in TRL's venv (benchmarks/make_trl_env.sh), never by the tests themselves:

    .venv-trl/bin/python benchmarks/trl_reference.py advantages   # GRPOTrainer's scale_rewards, RLOOTrainer's baseline
    .venv-trl/bin/python benchmarks/trl_reference.py cispo        # GRPOTrainer._compute_loss with loss_type="cispo"

It prints the numbers as JSON; tests/test_recipe_trl.py holds them, and names this command
in each test's docstring.

- `advantages`: a real GRPOTrainer (scale_rewards "group", "none" and "batch") and a real
  RLOOTrainer (normalize_advantages False), each on grpoctl's tiny model, asked for one
  batch of completions by their own `_generate_and_score_completions`, with a reward
  function that returns REWARDS in order; the advantages are the ones TRL's trainer computed.
- `cispo`: GRPOTrainer._compute_loss, TRL's loss method itself, called with loss_type
  "cispo" on the fixed log-probs below (the model's forward replaced by them, the rest
  of the trainer's state set as GRPOTrainer.__init__ sets it for one process); the loss
  and its gradient with respect to the log-probs.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from types import SimpleNamespace

import torch

# 3 groups of 4: one mixed, one flat, one uneven (0/1 rewards with a partial-credit 0.5).
GROUP = 4
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 1.0, 0.0]

# CISPO inputs: 3 sequences of 4 tokens, the last row with one padding token.
CISPO_LOGP = [[-1.0, -0.5, -2.0, -0.1], [-0.3, -1.2, -0.8, -2.5], [-0.7, -0.05, -1.5, -3.0]]
CISPO_OLD = [[-1.2, -0.5, -0.2, -2.1], [-0.1, -1.0, -2.8, -2.4], [-0.9, -0.15, -1.0, -0.2]]
CISPO_MASK = [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]]
CISPO_ADV = [1.5, -0.5, 0.8]
CISPO_EPSILON_HIGH = 5.0  # TRL's recommended epsilon_high for cispo (the ratio's cap)


def _trainer(kind: str, model_dir: str, **config):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    def fixed_rewards(prompts, completions, **_):
        return REWARDS[: len(completions)]  # one call per batch, groups contiguous

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    n_prompts = len(REWARDS) // GROUP
    dataset = Dataset.from_dict({"prompt": [f"1+{i}=" for i in range(n_prompts)]})
    Config, Trainer = (GRPOConfig, GRPOTrainer) if kind == "grpo" else (RLOOConfig, RLOOTrainer)
    args = Config(
        output_dir=tempfile.mkdtemp(prefix="trl-reference-"),
        per_device_train_batch_size=len(REWARDS),
        num_generations=GROUP,
        max_completion_length=4,
        report_to="none",
        use_cpu=True,
        seed=0,
        **config,
    )
    trainer = Trainer(
        model=model, reward_funcs=fixed_rewards, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    inputs = [{"prompt": prompt} for prompt in dataset["prompt"] for _ in range(GROUP)]
    return trainer, inputs


def advantages() -> dict:
    from grpoctl.tiny.model import create_tiny_model_dir

    model_dir = str(create_tiny_model_dir(tempfile.mkdtemp(prefix="trl-reference-model-") + "/model", seed=0))
    out: dict = {"rewards": REWARDS, "group_size": GROUP}
    for scale in ("group", "none", "batch"):
        trainer, inputs = _trainer("grpo", model_dir, scale_rewards=scale)
        out[f"grpo_scale_rewards_{scale}"] = trainer._generate_and_score_completions(inputs)["advantages"].tolist()
    trainer, inputs = _trainer("rloo", model_dir, normalize_advantages=False)
    out["rloo"] = trainer._generate_and_score_completions(inputs)["advantages"].tolist()
    return out


def cispo() -> dict:
    from accelerate import Accelerator
    from trl import GRPOTrainer

    logp = torch.tensor(CISPO_LOGP, requires_grad=True)
    mask = torch.tensor(CISPO_MASK)
    n = len(CISPO_LOGP)
    stand_in = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=0.0,
        loss_type="cispo",
        epsilon_low=0.2,
        epsilon_high=CISPO_EPSILON_HIGH,
        args=SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1),
        use_vllm=False,
        model=SimpleNamespace(training=True),
        accelerator=Accelerator(cpu=True),
        current_gradient_accumulation_steps=1,
        _entropy_bonus_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
    )
    inputs = {
        "prompt_ids": torch.zeros(n, 1, dtype=torch.long),
        "prompt_mask": torch.ones(n, 1, dtype=torch.long),
        "completion_ids": torch.zeros(n, 4, dtype=torch.long),
        "completion_mask": mask,
        "advantages": torch.tensor(CISPO_ADV),
        "old_per_token_logps": torch.tensor(CISPO_OLD),
        "num_items_in_batch": mask.sum(),
    }
    loss = GRPOTrainer._compute_loss(stand_in, None, inputs)
    loss.backward()
    return {
        "epsilon_high": CISPO_EPSILON_HIGH,
        "loss": loss.item(),
        "grad": logp.grad.tolist(),
        "cispo_clip_ratio": stand_in._metrics["train"]["cispo_clip_ratio"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["advantages", "cispo"])
    args = parser.parse_args()
    import trl

    result = advantages() if args.what == "advantages" else cispo()
    print(json.dumps({"trl": trl.__version__, **result}, indent=1))


if __name__ == "__main__":
    main()
