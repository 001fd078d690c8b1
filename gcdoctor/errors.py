"""Errors a user can cause: the CLI prints their message on one line and exits with code 2."""


class UserError(Exception):
    """Bad input from the user (unknown model, malformed file, impossible size, missing device)."""
