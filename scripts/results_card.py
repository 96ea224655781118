"""The setup card of a results page (scripts/results_page.py): what every run of the page
shares, read off the registry: the schedule as the config states it, the start, sample
completions, the response lengths in tokens (with lengths.png), the health flags this
setup can and cannot raise, and the code commit of every run.

Nothing here knows which task a page is on: what only words can say (what the model is,
how it was made) comes from the page file's `start:`; a tiny-model start is described
from its own config.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's grpoctl, whatever is installed

from grpoctl.analysis.health import LENGTH_COLLAPSE, WORKING_COLLAPSE  # noqa: E402
from grpoctl.analysis.token_lengths import token_counter  # noqa: E402
from grpoctl.rules import compute_dtype, resolve_dtype, weights_dtype  # noqa: E402
from grpoctl.views.report_plots import save_figure  # noqa: E402

ENDED = ("finished", "diverged")


def schedule_text(config: dict) -> str:
    """The schedule line, as the run's config has it (warm-up unit, constant or cosine)."""
    opt, loop, roll, ev = config["optimizer"], config["loop"], config["rollout"], config["eval"]
    unit = "GRPO steps" if opt.get("warmup_unit") == "grpo_step" else "optimizer steps"
    if opt.get("lr_schedule") == "constant":
        after = "then constant"
    else:
        after = f"then {opt['lr_schedule']} decay to {opt['min_lr_ratio']:g}x"
    warmup = f"{opt['warmup_steps']} {unit} of linear warm-up, {after}" if opt["warmup_steps"] else after
    per_step = loop["epochs_per_rollout_batch"] * roll["rollout_batch_size"] // loop["train_batch_size"]
    at_start = " and before training" if ev.get("at_start", True) else ""
    return (
        f"- **Schedule:** {loop['n_grpo_steps']} GRPO steps of {roll['rollout_batch_size']} rollouts "
        f"({roll['rollout_batch_size'] // roll['group_size']} prompts x {roll['group_size']}), {per_step} optimizer "
        f"step(s) each; lr {opt['lr']:g}, {warmup}; AdamW betas {opt['betas']}, grad clip {opt['max_grad_norm']:g}; "
        f"sampling temperature {roll['temperature']:g}, {roll['min_tokens']}-{roll['max_tokens']} new tokens; "
        f"{'greedy' if ev['greedy'] else 'sampled'} eval on {ev['subset']} held-out problems every {ev['every']} steps"
        f"{at_start}."
    )


def precision_text(config: dict, device: str) -> str:
    """What the runs' weights, gradients and AdamW states were stored in and their forward
    passes computed in (model.dtype, resolved for the device the run recorded)."""
    asked = config["model"].get("dtype", "auto")
    resolved = resolve_dtype(asked, "cuda" if device != "cpu" else "cpu")
    stored, computed = weights_dtype(resolved), compute_dtype(resolved)
    how = f"computed in {computed}" if stored == computed else f"forward passes under {computed} autocast"
    return (
        f"- **Precision:** weights, gradients and AdamW states in {stored}, {how} "
        f"(`model.dtype: {asked}` on {'cpu' if device == 'cpu' else 'a GPU'})."
    )


def start_text(config: dict, page: dict, starts: list[str]) -> str:
    path = config["model"]["path"]
    per_start = (" Eval accuracy before GRPO, per start: " + ", ".join(starts) + ".") if starts else ""
    if path == "tiny" or path.startswith("tiny@"):
        ws = config["model"]["warmstart"]
        return (
            f"- **Warm-start:** `model.path: {path}`, the tiny model's own supervised run on worked solutions (up to "
            f"{ws['steps']} steps, batch {ws['batch_size']}, lr {ws['lr']:g}, stopped at a probe accuracy of "
            f"{ws['target_accuracy']:g}; checkpoints kept at steps {ws['save_steps']}).{per_start}"
        )
    words = str(page.get("start") or "").strip()
    return f"- **Start:** `model.path: {path}`." + (f" {words}" if words else "") + per_start


VARIED = {"optimizer.lr": "lr", "loop.n_grpo_steps": "GRPO steps", "eval.every": "eval every"}


def varied_text(tables: dict) -> list[str]:
    """The schedule's keys that differ between the page's runs, with how many runs have
    each value: the run the card is drawn from is one of them, not all."""
    seen: dict[str, dict[str, set[int]]] = {key: defaultdict(set) for key in VARIED}
    for t in tables.values():
        for row in t.rows:
            for rd in row.runs:
                config = json.loads(rd.run.config)
                for key in VARIED:
                    section, name = key.split(".")
                    seen[key][f"{config[section][name]:g}"].add(rd.run.id)
    parts = [
        f"{VARIED[key]} " + ", ".join(f"{value} ({len(ids)})" for value, ids in values.items())
        for key, values in seen.items()
        if len(values) > 1
    ]
    return [f"- **Where the page's runs differ from it** (runs with each value): {'; '.join(parts)}."] if parts else []


def _starts(tables: dict) -> list[str]:
    """Every model.path the page's runs start from, with its mean step-0 eval."""
    first: dict[str, list[float]] = defaultdict(list)
    for t in tables.values():
        for row in t.rows:
            for rd in row.runs:
                path = json.loads(rd.run.config)["model"]["path"]
                if rd.evals and rd.evals[0][0] == 0:
                    first[path].append(rd.evals[0][1])
    return [f"`{p}` {statistics.fmean(v):.3f}" for p, v in first.items()] if len(first) > 1 else []


def lengths_plot(groups: dict[str, list[int]], max_tokens: int, unit: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.4), dpi=120)
    low = min(min(v) for v in groups.values() if v)
    bins = [x - 0.5 for x in range(low - 1, max_tokens + 3)]  # one bar per length, centred on it
    for label, values in sorted(groups.items(), key=lambda kv: int(kv[0].split()[1].split("-")[0])):
        ax.hist(values, bins=bins, alpha=0.55, label=f"{label} ({len(values)} completions)")
    ax.axvline(max_tokens, color="tab:red", lw=1, ls="--", label=f"token limit ({max_tokens})")
    ax.set_xlabel(f"completion length ({unit})")
    ax.set_ylabel("stored completions")
    ax.set_title("Response lengths of the stored train completions", loc="left", fontsize=11)
    ax.legend(fontsize=8, frameon=False)
    save_figure(fig, path, bbox_inches="tight")
    plt.close(fig)


def _reference(tables: dict):
    """The run the card is drawn from: the first study's baseline, its lowest ended seed."""
    for study, t in tables.items():
        base = t.versus.baseline if t.versus is not None else None
        row = next((r for r in t.rows if r.label == base), t.rows[0] if t.rows else None)
        ended = sorted((rd for rd in row.runs if rd.run.status in ENDED), key=lambda rd: rd.run.seed) if row else []
        if ended:
            return study, row, [rd for rd in row.runs if rd.run.status in ENDED], ended[0].run
    return None


def setup_card(registry, tables: dict, out: Path, page: dict) -> list[str]:
    lines = ["## Setup card", ""]
    found = _reference(tables)
    if found is None:
        return lines + ["No study of this page has an ended run yet: the card is drawn when one has."]
    study, base_row, base_runs, run = found
    config = json.loads(run.config)
    roll = config["rollout"]
    lines += [
        f"What every run shares (from `{run.name}`, the baseline of {study}; each study's spec changes only what it "
        "ablates):",
        "",
        schedule_text(config),
        precision_text(config, run.device or "cpu"),
        *varied_text(tables),
        start_text(config, page, _starts(tables)),
    ]
    lines += ["", f"Sample completions of `{run.name}` (train rollouts as stored; reward after the arrow):", ""]
    for step in (1, run.last_step):
        lines.append(f"- step {step}:")
        for s in registry.samples(run.id, step=step, kind="train")[:3]:
            text = (s.prompt + s.response).replace("\n", "⏎")
            lines.append(f"  - `{text}` → {s.reward:g} (truth {s.ground_truth})")
    lines += _lengths(registry, base_row.label, base_runs, run, roll["max_tokens"], out)
    lines += _commits(tables)
    return lines


def _lengths(registry, label: str, runs: list, run, max_tokens: int, out: Path) -> list[str]:
    count, unit = token_counter(json.loads(run.config)["model"]["path"])
    last = run.last_step
    stored: dict[str, list[int]] = defaultdict(list)
    for rd in runs:
        for s in registry.samples(rd.run.id, kind="train"):
            when = "steps 1-10" if s.step <= 10 else (f"steps {last - 9}-{last}" if s.step > last - 10 else None)
            if when:
                stored[when].append(count(s.response))
    every = [n for v in stored.values() for n in v]
    if len(every) < 2:
        return ["", "- **Response lengths:** too few stored completions to describe."]
    lengths_plot(dict(stored), max_tokens, unit, out / "lengths.png")
    early = statistics.fmean(stored.get("steps 1-10") or every)
    spread = statistics.stdev(every) / statistics.fmean(every)
    lines = [
        "",
        f"- **Response lengths** (stored train completions of `{label}`, {len(every)} of them, in {unit}): "
        f"{min(every)}-{max(every)}, median {statistics.median(every):g}, sd/mean {spread:.3f}, against a limit of "
        f"{max_tokens} tokens. The length-normalization findings' rules read this spread, run by run.",
        "",
        "![response lengths](lengths.png)",
        "",
    ]
    blowup = 3 * early
    route = (
        f"past the {max_tokens}-token limit, so only its cut-off route (over half the responses at the limit) can fire"
        if blowup > max_tokens
        else f"within the {max_tokens}-token limit, so both its routes can fire"
    )
    lines.append(
        f"- **Health flags on this setup:** responses average {early:.1f} {unit} over steps 1-10. Length blow-up "
        f"by its 3x route needs {blowup:.0f}, {route}; length collapse by its length route needs responses under "
        f"{LENGTH_COLLAPSE * early:.0f}, by its working route (runs that record it) under {WORKING_COLLAPSE:g}x "
        "the early share of responses that write working. "
        "Every flag's definition is in each study's report, under Health."
    )
    return lines


def _commits(tables: dict) -> list[str]:
    """The code commit of every run once, then each study's own mix (shared runs count in each)."""
    everyone: dict[str, set[int]] = defaultdict(set)
    for t in tables.values():
        for r in t.rows:
            for rd in r.runs:
                everyone[rd.run.git_commit or "unknown"].add(rd.run.id)
    lines = ["", "- **Code commit of every run** (the `git_commit` each run recorded):", ""]
    for commit, ids in everyone.items():
        lines.append(f"  - `{commit[:12]}`: {len(ids)} runs")
    if len(everyone) > 1:
        lines += ["", f"  **These runs came from {len(everyone)} different commits.** Study by study:", ""]
        for study, t in tables.items():
            by_commit: dict[str, list[str]] = defaultdict(list)
            for r in t.rows:
                for commit in dict.fromkeys(rd.run.git_commit or "unknown" for rd in r.runs):
                    n = sum((rd.run.git_commit or "unknown") == commit for rd in r.runs)
                    by_commit[commit].append(f"{r.label} ({n})")
            if len(by_commit) == 1:
                lines.append(f"  - {study}: every run from `{next(iter(by_commit))[:12]}`.")
            else:
                parts = "; ".join(f"`{c[:12]}`: {', '.join(v)}" for c, v in by_commit.items())
                lines.append(f"  - {study}: **its comparisons are across commits**: {parts}.")
    return lines
