"""The results page's words that are not numbers come from its page file, and its setup
card reads the schedule as the run's config states it (scripts/results_card.py,
scripts/results_page.py): fast checks, no registry."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import results_card  # noqa: E402
import results_page  # noqa: E402

from grpoctl.config import load_config, to_dict  # noqa: E402
from grpoctl.errors import UserError  # noqa: E402


def config_of(path: str) -> dict:
    return to_dict(load_config(path))


def test_the_schedule_line_follows_the_config():
    lab = results_card.schedule_text(config_of(str(ROOT / "experiments" / "lab.yaml")))
    assert "100 GRPO steps of 64 rollouts (8 prompts x 8), 1 optimizer step(s) each" in lab
    assert "lr 0.0001, 10 GRPO steps of linear warm-up, then constant" in lab and "cosine" not in lab
    tiny = results_card.schedule_text(config_of(str(ROOT / "experiments" / "tiny.yaml")))
    assert "optimizer steps of linear warm-up, then cosine decay to 0.1x" in tiny


def test_the_precision_line_says_what_the_runs_stored_and_computed_in():
    lab = config_of(str(ROOT / "experiments" / "lab.yaml"))
    assert results_card.precision_text(lab, "cpu") == (
        "- **Precision:** weights, gradients and AdamW states in float32, computed in float32 "
        "(`model.dtype: auto` on cpu)."
    )
    assert "in bfloat16, computed in bfloat16" in results_card.precision_text(lab, "NVIDIA H200")
    lab["model"]["dtype"] = "bf16-mixed"
    assert "in float32, forward passes under bfloat16 autocast" in results_card.precision_text(lab, "NVIDIA H200")


def test_the_start_line_is_the_page_s_words_off_the_tiny_model():
    config = config_of(str(ROOT / "experiments" / "lab.yaml"))
    line = results_card.start_text(config, {"start": "A 1.0M-parameter Qwen2."}, ["`lab` 0.252", "`lab-sft@100` 0.7"])
    assert line == (
        "- **Start:** `model.path: lab`. A 1.0M-parameter Qwen2. Eval accuracy before GRPO, per start: "
        "`lab` 0.252, `lab-sft@100` 0.7."
    )
    assert "Warm-start" not in line


def test_a_card_without_an_ended_run_says_so(tmp_path):
    running = SimpleNamespace(run=SimpleNamespace(status="running", seed=0))
    tables = {"s": SimpleNamespace(rows=[SimpleNamespace(label="b", runs=[running])], versus=None)}
    lines = results_card.setup_card(None, tables, tmp_path, {})
    assert lines[-1].startswith("No study of this page has an ended run yet") and not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "text, message",
    [
        ("- a\n", "a page file is a mapping"),
        ("name: p\nregistry: r.db\nout: o\nstudies: [a.yaml]\ncolour: red\n", "unknown key 'colour'"),
        ("name: p\nregistry: r.db\nstudies: [a.yaml]\n", "missing 'out'"),
        ("name: p\nregistry: r.db\nout: o\nstudies: [a.yaml]\nnot_run: [{claim: c}]\n", "row 1 must have exactly"),
        ("name: [\n", "cannot read the page file"),
    ],
)
def test_a_bad_page_file_is_one_line(tmp_path, text, message):
    page = tmp_path / "page.yaml"
    page.write_text(text)
    with pytest.raises(UserError) as err:
        results_page.read_page(page)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_every_shipped_page_file_reads():
    from grpoctl.analysis import findings as F

    for page in (ROOT / "experiments" / "pages").glob("*.yaml"):
        if "of" in yaml.safe_load(page.read_text()):  # a re-analysis overlay of a page: it reads as one
            assert F.read_reanalysis(page).page.is_file(), page
            continue
        spec = results_page.read_page(page)
        assert spec["studies"] and spec.get("title") and spec.get("task"), page
        if spec.get("reanalysis"):
            assert F.read_reanalysis(page.parent / spec["reanalysis"]).page == page, page
