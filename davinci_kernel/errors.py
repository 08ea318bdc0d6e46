"""Errors that mean "the user asked for something we cannot do" (exit code 2).

Everything else that escapes a command is our bug (exit code 1). Model-written code
never raises: its failures are data in ``EvalResult``.
"""


class UsageError(Exception):
    """Bad input: a missing file, a bad flag or value. The message is one line and says the fix."""
