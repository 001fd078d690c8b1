"""What is this path? One door for recorded runs: a run directory, a folder of rank run
directories, a run killed before it measured anything, a folder of per-rank traces, or a trace
file. No torch here; the facts modules are imported only when facts are opened."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gcdoctor.errors import UserError

FACTS_NAME = "facts.json"
EVENTS_NAME = "events.jsonl"
_RANK_DIR = re.compile(r"^rank-(\d+)$")

# kinds of recorded path
MISSING = "missing"          # nothing there
RUN = "run"                  # a run directory with its facts.json
RANKS = "ranks"              # rank-<r> run directories (a distributed watched run)
UNFINISHED = "unfinished"    # a run directory without facts.json (starting, or killed early)
TRACE_DIR = "trace-dir"      # any other folder: per-rank traces, if it holds any
TRACE = "trace"              # a file: a profiler trace
OTHER = "other"              # neither a file nor a folder


def rank_dirs(path: str | Path) -> dict[int, Path]:
    """{rank: run directory} of the rank-<r> folders under `path` that hold a facts.json."""
    out = {}
    for p in Path(path).iterdir() if Path(path).is_dir() else ():
        m = _RANK_DIR.match(p.name)
        if m and (p / FACTS_NAME).is_file():
            out[int(m.group(1))] = p
    return dict(sorted(out.items()))


def kind_of(path: str | Path) -> str:
    """Which kind of recorded path this is (one of the constants above); never raises."""
    p = Path(path)
    if p.is_dir():
        if (p / FACTS_NAME).is_file():
            return RUN
        if rank_dirs(p):
            return RANKS
        from gcdoctor.run.rundir import LOCK_NAME
        if any((p / m).exists() for m in (LOCK_NAME, EVENTS_NAME, "config.json")):
            return UNFINISHED
        return TRACE_DIR
    if p.is_file():
        return TRACE
    return OTHER if p.exists() else MISSING


def events_of(path: str | Path) -> Path | None:
    """The event stream of a run directory (or the path itself when it is a file), if there is one."""
    p = Path(path)
    if p.is_dir():
        p = p / EVENTS_NAME
    return p if p.is_file() else None


def open_recorded(path: str | Path) -> Any:
    """Facts of any recorded path `gcdoctor analyze` takes; one-line UserErrors (IncompleteRun for
    a run that has measured nothing yet)."""
    path = Path(path)
    kind = kind_of(path)
    if kind == RUN:
        from gcdoctor.facts import Facts
        from gcdoctor.trace.launch_response import fill_missing_whatif
        facts = Facts.load(path / FACTS_NAME)
        fill_missing_whatif(facts, path)  # a run recorded before the what-if: derived from its own traces
        return facts
    if kind == RANKS:
        from gcdoctor.watching.ranks import merge_ranks
        return merge_ranks(path, rank_dirs(path))
    if kind == UNFINISHED:
        from gcdoctor.errors import IncompleteRun
        from gcdoctor.run.rundir import live_owner
        owner = live_owner(path)
        if owner is not None:
            raise IncompleteRun(f"{path}: a gcdoctor run still starting (pid {owner}): no facts.json yet, "
                                "nothing measured to judge; analyze it once it has measured something")
        raise IncompleteRun(f"{path}: a gcdoctor run directory without facts.json: the run was killed before "
                            "it measured anything (its gcdoctor.log and events.jsonl say how far it got)")
    if kind == TRACE_DIR:  # a folder of per-rank traces (torch's tensorboard_trace_handler, HTA's layout)
        from gcdoctor.trace.ranks import facts_from_trace_dir
        return facts_from_trace_dir(path)
    if kind == TRACE:
        from gcdoctor.trace import facts_from_trace
        return facts_from_trace(path)
    if kind == OTHER:
        raise UserError(f"{path}: not a run directory or a trace file")
    raise UserError(f"{path}: no such file or directory")


__all__ = ["kind_of", "open_recorded", "rank_dirs", "events_of", "FACTS_NAME", "EVENTS_NAME"]
