"""Become a sweep member's trainer, with signals that work: `python -m grpoctl.sweep.exec_trainer PPID -- CMD...`.

Two things the trainer's stop logic (SIGINT and SIGTERM: finish the step, checkpoint,
end `interrupted`; a second signal: stop at once) needs, and cannot get from a plain
subprocess of its supervisor:

1. Signals it can receive. A Ray worker runs its tasks with SIGINT blocked and SIGPIPE
   ignored, and a child inherits both (the mask and SIG_IGN survive fork and exec):
   forwarded Ctrl-Cs would stay pending forever. So the mask is emptied and SIGINT,
   SIGTERM and SIGPIPE are back to their defaults before the command starts.
2. No life after its supervisor. When a Ray worker is killed (the OOM killer, `kill
   -9`, its node's raylet going away), Ray retries the member elsewhere, and a trainer
   left running would go on writing beside its successor. The claim fences its rows
   out, but not its checkpoint files. So Linux is asked to send the trainer SIGTERM
   when its parent dies (prctl PR_SET_PDEATHSIG, kept across exec). SIGTERM is the
   trainer's first Ctrl-C: it finishes its step, checkpoints and ends `interrupted`,
   which releases its claim, so the retry takes the run over at once instead of
   waiting for the lease to expire.

Then this process becomes the command (exec: same pid, so the trainer is still its
supervisor's direct child). Not through subprocess's preexec_fn, which is unsafe in a
process with threads (a Ray worker has many). Elsewhere than Linux there is no
parent-death signal; the rest holds.
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


def receive_signals() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        raise SystemExit("usage: python -m grpoctl.sweep.exec_trainer PARENT_PID -- COMMAND [ARG...]")
    receive_signals()
    die_with_parent(int(argv[0]))
    os.execvp(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
