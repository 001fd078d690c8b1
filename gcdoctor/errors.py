"""Errors a user can cause, and the exit-code contract of every command (docs/exit-codes.md).

    0    ok: the command did what was asked (verdicts of any severity may have fired)
    1    --fail-on (or compare --fail-on-regression) fired
    2    user error: bad input, one line on stderr, nothing measured
    3    incomplete: a probe or a rule crashed, or the run was cut short by a crash
         (an unexpected exception: one line on stderr, the traceback kept in the run directory)
    130  interrupted (Ctrl-C, SIGTERM, q in the TUI): what was measured is kept; a signal
         that arrives after the work, until the process has gone, is 130 too (cli.entry)

When several apply, the larger wins, except that 130 always wins (the user stopped the run) and
2 is only given before any work started.
"""

EXIT_OK = 0
EXIT_FAIL_ON = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """Bad input from the user (unknown model, malformed file, impossible size, missing device)."""


class RunDirectoryBusy(UserError):
    """Another process owns the run directory (its lock is held)."""


class RunInterrupted(Exception):
    """The user asked to stop (q in the TUI, Ctrl-C): write what was measured and end."""


class IncompleteRun(UserError):
    """A run directory with nothing to judge yet: its run is still starting, or was killed before
    it wrote its first facts.json (exit code 3, "incomplete", not 2)."""
