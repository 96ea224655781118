"""One exception for everything the user got wrong.

Anything raised as `UserError` reaches the terminal as one line on stderr and exit code 2,
with no traceback, and the command must not have written anything before raising it.
"""


class UserError(Exception):
    """Bad input: a wrong flag, an unknown run, an invalid config value. The CLI prints
    it in one line and exits with `exit_code`."""

    exit_code = 2


class PluginFailed(UserError):
    """A loss or advantage plugin that raised, or returned the wrong shape or a non-finite
    loss, in the middle of a run: one line naming the plugin, exit 1. Unlike other
    UserErrors the run exists; it is recorded failed, with nothing of the failed step."""

    exit_code = 1


# The exit code of a trainer that stopped because the registry could not be reached: a
# temporary failure (sysexits' EX_TEMPFAIL), which a sweep member retries by resuming.
TEMPFAIL_EXIT = 75


# Lines a library appends to its errors that say nothing about what went wrong: SQLAlchemy's
# link to its error docs, and the statement and parameters it echoes.
_NOISE = ("(Background on this error at:", "[SQL:", "[parameters:")


def error_line(error: BaseException | str) -> str:
    """The line of an error worth showing in a one-line summary (a sweep's member table):
    its last line that is not a library's boilerplate, with whitespace folded."""
    text = error if isinstance(error, str) else str(error)
    lines = [" ".join(line.split()) for line in text.strip().splitlines()]
    meaningful = [line for line in lines if line and not line.startswith(_NOISE)]
    if meaningful:
        return meaningful[-1]
    return type(error).__name__ if isinstance(error, BaseException) else "(no message)"
