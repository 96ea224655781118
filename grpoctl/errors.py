"""One exception for everything the user got wrong.

Anything raised as `UserError` reaches the terminal as one line on stderr and exit code 2,
with no traceback, and the command must not have written anything before raising it.
"""


class UserError(Exception):
    """Bad input: a wrong flag, an unknown run, an invalid config value."""
