"""What a person watching a run sees: a live panel on a terminal, plain lines elsewhere.

The panel carries the seed's early warnings next to the north star: eval accuracy, and
token entropy, response length and gradient norm, which move before a collapse shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.table import Table

from grpoctl import metrics
from grpoctl.formatting import format_number

if TYPE_CHECKING:
    from grpoctl.config import Config


def eta_seconds(recent_step_seconds: list[float], step: int, total: int) -> tuple[float, float]:
    """(seconds per step, seconds left): the mean of the recent steps' times, times the
    steps left after `step`, which after a --resume are all a run has to do."""
    per_step = sum(recent_step_seconds) / len(recent_step_seconds) if recent_step_seconds else 0.0
    return per_step, per_step * max(total - step, 0)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class Progress:
    def __init__(self, cfg: Config, live: bool = True) -> None:
        self.total = cfg.loop.n_grpo_steps
        self.console = Console(stderr=True)
        self.live = live and self.console.is_terminal
        self._live: Live | None = None
        self._times: list[float] = []
        self._step = 0  # the last step shown
        self._every = 1 if self.total <= 200 else max(1, self.total // 100)

    def __enter__(self) -> Progress:
        if self.live:
            self._live = Live(self._panel(0, {}, None), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def update(self, step: int, figures: dict, eval_accuracy: float | None) -> None:
        self._times.append(figures.get(metrics.STEP_TIME, 0.0))
        self._step = step
        if self._live is not None:
            self._live.update(self._panel(step, figures, eval_accuracy))
        elif step % self._every == 0 or step == self.total:
            self.console.print(self._line(step, figures, eval_accuracy), highlight=False, soft_wrap=True)

    def _rate(self) -> tuple[float, float]:
        return eta_seconds(self._times[-10:], self._step, self.total)

    def _line(self, step: int, m: dict, acc: float | None) -> str:
        per_step, eta = self._rate()
        return (
            f"step {step}/{self.total}  reward {format_number(m.get(metrics.REWARD))}  "
            f"eval {format_number(acc)}  entropy {format_number(m.get(metrics.TOKEN_ENTROPY))}  "
            f"len {format_number(m.get(metrics.RESPONSE_LENGTH), 1)}  "
            f"gnorm {format_number(m.get(metrics.GRAD_NORM))}  "
            f"{per_step:.2f} s/step  eta {_clock(eta)}  "
            f"mem {format_number(m.get(metrics.MEM_PEAK), 0)} MiB"
        )

    def _panel(self, step: int, m: dict, acc: float | None) -> Table:
        per_step, eta = self._rate()
        table = Table(show_header=True, header_style="bold", box=None)
        for col in (
            "step",
            "train reward",
            "eval acc",
            "entropy",
            "mean len",
            "grad norm",
            "s/step",
            "ETA",
            "peak MiB",
        ):
            table.add_column(col, justify="right")
        table.add_row(
            f"{step}/{self.total}",
            format_number(m.get(metrics.REWARD)),
            format_number(acc),
            format_number(m.get(metrics.TOKEN_ENTROPY)),
            format_number(m.get(metrics.RESPONSE_LENGTH), 1),
            format_number(m.get(metrics.GRAD_NORM)),
            f"{per_step:.2f}",
            _clock(eta),
            format_number(m.get(metrics.MEM_PEAK), 0),
        )
        return table

    def final(self, status: str, error: str | None, eval_accuracy: float | None) -> None:
        note = f" ({error.splitlines()[0]})" if error else ""
        self.console.print(f"run {status}{note}; last eval accuracy {format_number(eval_accuracy)}", highlight=False)
