"""Start a command that gets SIGTERM if its supervisor dies: `python -m grpoctl.sweep.orphans PPID -- CMD...`.

A sweep member's trainer must not outlive the process that supervises it. When a Ray
worker is killed (the OOM killer, `kill -9`, its node's raylet going away), Ray retries
the member elsewhere, and a trainer left running would go on writing beside its
successor. The claim fences its rows out, but not its checkpoint files. So the trainer
is started through this shim, which asks Linux to send it SIGTERM when its parent dies
(prctl PR_SET_PDEATHSIG, kept across exec) and then becomes the command. SIGTERM is
the trainer's first Ctrl-C: it finishes its step, checkpoints and ends `interrupted`,
which releases its claim, so the retry takes the run over at once instead of waiting
for the lease to expire.

Not through subprocess's preexec_fn: that is unsafe in a process with threads (a Ray
worker has many). Elsewhere than Linux the command simply runs, without the guard.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        return
    if os.getppid() != parent:  # it died before the guard was set: act as if it had fired
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        raise SystemExit("usage: python -m grpoctl.sweep.orphans PARENT_PID -- COMMAND [ARG...]")
    die_with_parent(int(argv[0]))
    os.execvp(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
