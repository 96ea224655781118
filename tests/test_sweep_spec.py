"""Value specs (`1e-6..1e-4`, `a..b:n`, `a,b,c`) and ablation specs expanded into runs.

All of this happens before anything is launched or written: every error here must be
one line, and a bad variant must stop the whole sweep before its first run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpoctl.config import DEFAULT_CONFIG, load_config
from grpoctl.errors import UserError
from grpoctl.rules import config_hash
from grpoctl.sweep.spec import ablation, label_value, override_text, param_sweep, parse_seeds, parse_values

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("1e-6..1e-4", [1e-6, 3e-6, 1e-5, 3e-5, 1e-4]),
        ("1e-4..1e-3", [1e-4, 3e-4, 1e-3]),
        ("2e-5..1e-4", [2e-5, 3e-5, 1e-4]),  # bounds off the 1-3 grid are kept
        ("1e-5..1e-3:3", [1e-5, 1e-4, 1e-3]),
        ("1e-4..1e-3:4", [1e-4, 2.15e-4, 4.64e-4, 1e-3]),
        ("2..8:3", [2, 4, 8]),  # integer bounds give integers
        ("1e-5, 3e-5", [1e-5, 3e-5]),
        ("true,false", [True, False]),
        ("grpo_clip,no_baseline", ["grpo_clip", "no_baseline"]),
        ("8,16", [8, 16]),
        ("null,0.28", [None, 0.28]),  # the one value parser: null is None, as in train overrides
        ("[0.9,0.99],[0.9,0.95]", [[0.9, 0.99], [0.9, 0.95]]),  # lists in brackets are one item each
        ("1e-4, 3e-4", [1e-4, 3e-4]),
    ],
)
def test_value_specs(spec, expected):
    values = parse_values(spec)
    assert values == expected
    assert [type(v) for v in values] == [type(v) for v in expected]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("1e-4..1e-6", "must go upward (write 1e-6..1e-4)"),
        ("1e-4..1e-4", "must go upward"),
        ("1e-4..1e-3:1", "at least 2 points"),
        ("1e-4..1e-3:x", "must be an integer"),
        ("0..1e-3", "positive bounds"),
        ("-1e-3..1e-3", "positive bounds"),
        ("1e-4..", "not a number"),
        ("a..b", "not a number"),
        ("1e-4,,1e-3", "empty item"),
        ("1e-4,", "empty item"),
        ("", "empty --values"),
        ("1,1", "repeats"),
    ],
)
def test_bad_value_specs_are_one_line_user_errors(spec, message):
    with pytest.raises(UserError) as err:
        parse_values(spec)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["null", "0.28", "1e-5", "true", "False", "8", "grpo_clip", "[1, 2]", "{a: 1}", "~"])
def test_sweep_items_and_train_overrides_read_a_value_alike(text):
    from grpoctl.config import _parse_override, parse_value

    value = parse_value(text)
    assert parse_values(text) == [value] and _parse_override(f"variant={text}")[1] == value
    assert type(parse_values(text)[0]) is type(value)


@pytest.mark.parametrize("spec", ["[1,2", "1,2]", "[1,2],{a"])
def test_unbalanced_brackets_are_one_line_errors(spec):
    with pytest.raises(UserError, match="bracket|closing") as err:
        parse_values(spec)
    assert "\n" not in str(err.value)


def test_a_sweep_over_null_plans_a_run_per_value():
    plan = param_sweep("loss.cliprange_high", "null,0.28")
    assert [v.label for v in plan.variants] == ["cliprange_high=null", "cliprange_high=0.28"]
    assert [v.config["loss"]["cliprange_high"] for v in plan.variants] == [None, 0.28]
    assert len({v.config_hash for v in plan.variants}) == 2


def test_values_read_well_and_round_trip_through_overrides():
    assert [label_value(v) for v in parse_values("1e-6..1e-4")] == ["1e-6", "3e-6", "1e-5", "3e-5", "1e-4"]
    assert label_value(0.2) == "0.2" and label_value(True) == "true"
    for value in ("grpo_clip", "true", "null", "a: b", "lr=3e-5"):  # strings stay strings
        assert load_config(None, [f"variant={override_text(value)}"]).variant == value
    assert load_config(None, [f"optimizer.lr={override_text(3e-5)}"]).optimizer.lr == 3e-5
    assert load_config(None, [f"optimizer.betas={override_text([0.9, 0.99])}"]).optimizer.betas == [0.9, 0.99]


def test_seeds():
    assert parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds([3]) == [3] and parse_seeds(None) is None
    for bad in ("0,x", "1,1", ""):
        with pytest.raises(UserError):
            parse_seeds(bad)


@pytest.mark.slow
def test_param_sweep_names_hashes_and_seeds():
    plan = param_sweep("lr", "1e-4..1e-3", overrides=["steps=5"], seeds="0,1")
    assert plan.name == "lr-sweep" and plan.kind == "sweep"
    assert [(v.label, v.seed) for v in plan.variants] == [
        ("lr=1e-4", 0),
        ("lr=1e-4", 1),
        ("lr=3e-4", 0),
        ("lr=3e-4", 1),
        ("lr=1e-3", 0),
        ("lr=1e-3", 1),
    ]
    assert plan.variants[3].run_name == "lr-sweep-lr=3e-4-s1"
    # The hash is the config's, the same one the trainer computes from the same overrides.
    cfg = load_config(DEFAULT_CONFIG, ["steps=5", "optimizer.lr=3e-4", "seed=1"])  # `grpoctl train`'s default
    assert plan.variants[3].config_hash == config_hash(cfg)
    run = plan.run_config(plan.variants[3])
    assert run["optimizer"]["lr"] == 3e-4 and run["group"] == "lr-sweep" and run["logging"]["live"] is False
    assert run["name"] == "lr-sweep-lr=3e-4-s1" and run["variant"] == "lr=3e-4"
    assert param_sweep("optimizer.lr", "1e-4,2e-4").name == "lr-sweep"  # dotted path, short name
    assert param_sweep("loss", "grpo_clip,grpo_no_clip", name="mine").name == "mine"


def test_param_sweep_checks_the_key_and_each_value():
    with pytest.raises(UserError, match="unknown config key 'lrr'"):
        param_sweep("lrr", "1e-4,1e-3")
    with pytest.raises(UserError, match="variant 'loss=nope'.*not one of"):
        param_sweep("loss", "grpo_clip,nope")
    with pytest.raises(UserError, match="repeats a value"):
        param_sweep("lr", "1e-4,0.0001")
    with pytest.raises(UserError, match="same config"):
        param_sweep("steps", "5,5.0")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.slow
def test_ablation_applies_minimal_diffs_on_the_base(tmp_path):
    write(tmp_path / "base.yaml", "optimizer:\n  lr: 3.0e-5\nloop:\n  n_grpo_steps: 50\n")
    spec = write(
        tmp_path / "abl.yaml",
        """
base: base.yaml
steps: 20
common: {rollout: {group_size: 4}}
seeds: [0, 1]
variants:
  nested: {loss: {loss_type: reinforce_with_baseline}}
  dotted: {loss.loss_type: no_baseline, lr: 1.0e-5}
  plain: {}
""",
    )
    plan = ablation(spec)
    assert plan.name == "abl" and plan.kind == "ablation" and plan.base == str(tmp_path / "base.yaml")
    assert [(v.label, v.seed) for v in plan.variants][:3] == [("nested", 0), ("nested", 1), ("dotted", 0)]
    configs = {(v.label, v.seed): load_config(plan.base, v.overrides) for v in plan.variants}
    nested, dotted, plain = configs[("nested", 0)], configs[("dotted", 1)], configs[("plain", 0)]
    assert nested.loss.loss_type == "reinforce_with_baseline" and nested.optimizer.lr == 3e-5
    assert dotted.loss.loss_type == "no_baseline" and dotted.optimizer.lr == 1e-5 and dotted.seed == 1
    assert plain.loss.loss_type == "grpo_clip"  # the default, untouched
    assert all(c.loop.n_grpo_steps == 20 and c.rollout.group_size == 4 for c in configs.values())
    assert len({v.config_hash for v in plan.variants}) == 6


def test_ablation_base_inline_and_command_line_overrides(tmp_path):
    spec = write(
        tmp_path / "abl.yaml",
        "name: x\nbase: {loop: {n_grpo_steps: 7}}\nvariants:\n  a: {lr: 1.0e-4}\n  b: {lr: 2.0e-4}\n",
    )
    plan = ablation(spec, overrides=["eval.every=3"], seeds="5", name="y")
    assert plan.name == "y" and plan.base is None
    cfg = load_config(None, plan.variants[1].overrides)
    assert (cfg.loop.n_grpo_steps, cfg.eval.every, cfg.optimizer.lr, cfg.seed) == (7, 3, 2e-4, 5)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "variants:\n  a: {lr: 1.0e-4}\n  b: {loss.loss_type: nope}\n",
            "variant 'b': loss.loss_type='nope' is not one of",
        ),
        ("variants:\n  a: {lrr: 1}\n", "variant 'a': unknown config key 'lrr'"),
        ("variants:\n  a: {lr: 1.0e-4, optimizer.lr: 2.0e-4}\n", "optimizer.lr is set twice"),
        ("variants:\n  a: {lr: 1.0e-4}\n  b: {optimizer: {lr: 1.0e-4}}\n", "same config"),
        ("variants:\n  a: 3\n", "must be a mapping"),
        ("variants: []\n", "'variants' must map"),
        ("base: nowhere.yaml\nvariants:\n  a: {}\n", "base config 'nowhere.yaml' not found"),
        ("bogus_key: 1\nvariants:\n  a: {}\n", "unknown config key 'bogus_key'"),
        ("variants: [unclosed\n", "invalid yaml"),
        ("variants:\n  a: {loss.loss_type: no_baseline, loop.epochs_per_rollout_batch: 2}\n", "on-policy only"),
    ],
)
def test_invalid_ablations_are_refused_whole(tmp_path, text, message):
    with pytest.raises(UserError) as err:
        ablation(write(tmp_path / "abl.yaml", text))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_a_bad_variant_writes_nothing(tmp_path):
    spec = write(tmp_path / "abl.yaml", "variants:\n  good: {lr: 1.0e-4}\n  bad: {loss.loss_type: nope}\n")
    db = tmp_path / "r.db"
    out = subprocess.run(
        [sys.executable, "-m", "grpoctl", "sweep", str(spec), "--db", str(db)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("error: variant 'bad'")
    assert not db.exists() and not (tmp_path / "outputs").exists()


# experiments/ files that are one run's config, not a study of variants
RUN_CONFIGS = ("tiny", "lab", "h100", "rtx4090", "rtx4090-lora")


@pytest.mark.slow
def test_every_shipped_experiment_expands(tmp_path):
    """Each experiments/*.yaml names a base that exists and only valid variants.
    GPU specs need experiments/h100.yaml (another helper's); skipped until it exists."""
    specs = [p for p in sorted(EXPERIMENTS.glob("*.yaml")) if p.stem not in RUN_CONFIGS]
    assert len(specs) >= 13
    for path in specs:
        base = path.read_text().split("base:", 1)[1].split()[0]
        if not (EXPERIMENTS / base).exists():
            continue
        plan = ablation(path)
        assert plan.name == path.stem and len(plan.variants) >= 2
        if path.stem.startswith("tiny-"):  # minutes on a laptop, not hours
            assert all("loop.n_grpo_steps=60" in v.overrides for v in plan.variants), path


@pytest.mark.slow
def test_the_baseline_is_stated_or_the_variant_that_changes_nothing(tmp_path):
    plain = write(tmp_path / "plain.yaml", "common: {lr: 1.0e-4}\nvariants:\n  hot: {lr: 1.0e-3}\n  plain: {}\n")
    assert ablation(plain).baseline == "plain" and ablation(plain).spec["baseline"] == "plain"
    # Setting a key to the value the shared config has already changes nothing either.
    same = write(
        tmp_path / "same.yaml",
        "common: {lr: 1.0e-4}\nseeds: [3, 4]\nvariants:\n  hot: {lr: 1.0e-3}\n  cool: {lr: 1.0e-4}\n",
    )
    assert ablation(same).baseline == "cool"
    stated = write(tmp_path / "stated.yaml", "baseline: hot\nvariants:\n  hot: {lr: 1.0e-3}\n  plain: {}\n")
    assert ablation(stated).baseline == "hot"
    none = write(tmp_path / "none.yaml", "variants:\n  a: {lr: 1.0e-3}\n  b: {lr: 2.0e-3}\n")
    assert ablation(none).baseline is None and "baseline" not in ablation(none).spec
    # A parameter sweep: the value the base config has, when it is one of the values.
    assert param_sweep("lr", "1e-4..1e-3", overrides=["lr=3e-4"]).baseline == "lr=3e-4"
    assert param_sweep("lr", "1e-6..1e-5").baseline is None
    wrong = write(tmp_path / "wrong.yaml", "baseline: nope\nvariants:\n  a: {lr: 1.0e-3}\n  b: {}\n")
    with pytest.raises(UserError, match="baseline 'nope' is not one of the variants: a, b"):
        ablation(wrong)


def test_every_shipped_study_states_its_baseline():
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        if path.stem in RUN_CONFIGS:
            continue
        data = yaml.safe_load(path.read_text())
        assert data.get("baseline") in data["variants"], path


@pytest.mark.slow
def test_a_run_config_is_absolute_and_hashes_the_same_from_its_yaml(tmp_path, monkeypatch):
    """What a member's trainer gets: the full config in a file, paths absolute, so it
    means the same from any directory or machine, with the hash the plan knows it by."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    (tmp_path / "my.prompt").write_text("{question}")
    plan = param_sweep(
        "lr",
        "1e-5,3e-5",
        overrides=[
            "data.source=jsonl",
            "data.train_path=data/train.jsonl",
            "data.eval_path=data/train.jsonl",
            "template=my.prompt",
            "checkpoint.dir=ckpt",
            "model.path=Qwen/Qwen2.5-Math-1.5B",
        ],
    )
    variant = plan.variants[1]
    run = plan.run_config(variant, "renamed")
    assert run["data"]["train_path"] == str(tmp_path / "data" / "train.jsonl")
    assert run["prompt"]["template"] == str(tmp_path / "my.prompt")
    assert run["checkpoint"]["dir"] == str(tmp_path / "ckpt")
    assert run["model"]["path"] == "Qwen/Qwen2.5-Math-1.5B"  # no such directory here: a hub id, as written
    assert run["runtime"]["cache_dir"] == str(tmp_path / "outputs" / "cache")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "run.yaml").write_text(yaml.safe_dump(run))
    monkeypatch.chdir(elsewhere)
    cfg = load_config(elsewhere / "run.yaml")
    assert config_hash(cfg) == variant.config_hash and cfg.name == "renamed" and cfg.optimizer.lr == 3e-5
