"""Fault injection for the fault tests: make this process signal itself at a named point.

    GRPOCTL_FAULT="checkpoint-rename@4:KILL"   # SIGKILL between writing step-4.tmp and renaming it
    GRPOCTL_FAULT="step-rollouts@3:STOP"       # stop once step 3's rollouts exist, for a test to signal it

Several faults are separated by commas. Points are reached in this order within a step
(train/step.py): `step-start@N` and `step-rollouts@N` (prompts drawn and rollouts
generated: the step has not touched the weights yet), `step-train@N` (it is about to),
`step-record@N` (updated, and evaluated if due: its rows are about to be committed),
then, when the step saves one, `checkpoint-write@N` and `checkpoint-rename@N`. A point
is a place in the code rather than a moment in time, so a test that kills a process
there cannot pass or fail by timing. Unset (always, outside tests), it costs one lookup
of an environment variable.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "GRPOCTL_FAULT"


def fault_point(point: str, step: int) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    for item in spec.split(","):
        where, _, name = item.strip().partition(":")
        if where == f"{point}@{step}":
            os.kill(os.getpid(), getattr(signal, f"SIG{name}"))
