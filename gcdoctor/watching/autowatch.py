"""Watch an unmodified training script: `gcdoctor watch [--out DIR] -- python train.py ...`.

The command runs the script with a `sitecustomize` that calls `install_from_env()` in every Python
process it starts (torchrun's workers too). That registers torch's global module-forward and
optimizer-step hooks and waits:

- the model is the first module whose forward runs at the top level (not inside another module's),
  in training mode with grad enabled, owning parameters that require grad (wrappers such as DDP,
  FSDP or torch.compile's are unwrapped to the model inside);
- a step ends at each `optimizer.step()` of the first optimizer that steps, and begins at the
  model's next forward: the data wait is from one step's end to the next one's first forward
  (zero_grad and the LR scheduler fall there too); gradient accumulation's forwards are micro-batches
  of one step; the loss is the model output's `loss`, when it has one;
- a process that never trains (the torchrun launcher, a data-loader worker) writes nothing.

The run directory is written at exit (atexit). Settings come from the environment the command sets:
GCDOCTOR_WATCH_OUT, GCDOCTOR_WATCH_PROFILE ("5,6"), GCDOCTOR_WATCH_TELEMETRY_HZ, GCDOCTOR_WATCH_RANKS.
"""
from __future__ import annotations

import atexit
import os
import re
import sys
from pathlib import Path
from typing import Any

ENV_OUT, ENV_PROFILE = "GCDOCTOR_WATCH_OUT", "GCDOCTOR_WATCH_PROFILE"
ENV_TELEMETRY, ENV_RANKS = "GCDOCTOR_WATCH_TELEMETRY_HZ", "GCDOCTOR_WATCH_RANKS"

SITECUSTOMIZE = '''"""gcdoctor watch: watch this process's training (gcdoctor.watching.autowatch), then run any
sitecustomize this one shadows."""
import os, sys
_here = os.path.dirname(os.path.abspath(__file__))
if os.environ.get("GCDOCTOR_WATCH_OUT"):
    try:
        import gcdoctor.watching.autowatch
        gcdoctor.watching.autowatch.install_from_env()
    except Exception as exc:  # never break the user's script
        sys.stderr.write(f"gcdoctor watch: not watching this process ({type(exc).__name__}: {exc})\\n")
# chain to the sitecustomize this one shadows, if there is one
_path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_me = sys.modules.pop("sitecustomize", None)
_saved, sys.path[:] = sys.path[:], _path
try:
    import sitecustomize  # noqa: F401
except ImportError:
    pass
finally:
    sys.path[:] = _saved
    if "sitecustomize" not in sys.modules and _me is not None:
        sys.modules["sitecustomize"] = _me  # importlib reads it back when this module is done
'''


def write_site(folder: Path) -> Path:
    """The sitecustomize the command puts first on PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def _unwrap(module: Any) -> Any:
    """The model inside DDP / FSDP1 (`.module`), torch.compile (`._orig_mod`) and similar wrappers."""
    for _ in range(4):
        inner = getattr(module, "_orig_mod", None) or getattr(module, "module", None)
        import torch
        if not isinstance(inner, torch.nn.Module):
            return module
        module = inner
    return module


class AutoWatch:
    """The global hooks of one process, and its Watcher once the model has run."""

    def __init__(self, out: str, profile_steps: tuple[int, ...], telemetry_hz: float, ranks: str) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
        self.out, self.profile_steps, self.telemetry_hz, self.ranks = out, profile_steps, telemetry_hz, ranks
        self.watcher: Any = None
        self.optimizer: Any = None
        self.depth = 0
        self._root_hook: Any = None
        self._fwd = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        self._opt = [register_optimizer_step_pre_hook(self._opt_pre), register_optimizer_step_post_hook(self._opt_post)]
        atexit.register(self.close)

    def _pre(self, module: Any, args: Any) -> None:
        import torch
        top, self.depth = self.depth == 0, self.depth + 1
        if not top or self.watcher is not None:
            return
        if not (module.training and torch.is_grad_enabled()):
            return
        if not any(p.requires_grad for p in module.parameters()):
            return
        from gcdoctor.watching.watcher import Watcher
        model = _unwrap(module)
        for h in self._fwd:  # from here on the Watcher's own hooks on the model do the work
            h.remove()
        self.depth = 0
        self.watcher = Watcher(model, None, self.out, profile_steps=self.profile_steps,
                               telemetry_hz=self.telemetry_hz, ranks=self.ranks).start()
        if model is module:  # the model's own pre-hook was registered too late for this call
            self.watcher._forward_pre(model, tuple(args), {})
        else:  # a wrapper (DDP): a step starts at its forward, before its collectives
            self.watcher.begin_step()
            self._root_hook = module.register_forward_pre_hook(lambda *a: self.watcher.begin_step())

    def _post(self, module: Any, args: Any, output: Any) -> None:
        self.depth = max(0, self.depth - 1)

    def _opt_pre(self, opt: Any, args: Any, kwargs: Any) -> None:
        w = self.watcher
        if w is None:
            return
        if self.optimizer is None:
            self.optimizer = opt
            w.optimizer = opt
            w.name_optimizer(opt)
            w.facts.watch.phases_from = "model+optimizer"
        if opt is self.optimizer:
            w._optimizer_boundary("opt0")

    def _opt_post(self, opt: Any, args: Any, kwargs: Any) -> None:
        w = self.watcher
        if w is not None and opt is self.optimizer:
            w._optimizer_boundary("opt1")
            w.end_step()

    def close(self) -> None:
        for h in self._fwd + self._opt + ([self._root_hook] if self._root_hook is not None else []):
            h.remove()
        if self.watcher is not None and self.watcher.enabled:
            err = getattr(sys, "last_value", None)  # the script's uncaught exception, if it ended with one
            interrupted = isinstance(err, KeyboardInterrupt)
            self.watcher.close(interrupted=interrupted, error=None if err is None or interrupted else repr(err))


_ACTIVE: AutoWatch | None = None


def install_from_env() -> AutoWatch | None:
    """Called by the sitecustomize of `gcdoctor watch`: watch this process as the environment says."""
    global _ACTIVE
    out = os.environ.get(ENV_OUT)
    if not out or _ACTIVE is not None:
        return _ACTIVE
    prof = tuple(int(x) for x in os.environ.get(ENV_PROFILE, "5,6").split(",") if x.strip())
    _ACTIVE = AutoWatch(out, prof, float(os.environ.get(ENV_TELEMETRY, "20")), os.environ.get(ENV_RANKS, "all"))
    return _ACTIVE


def hold_against(out: Path, against: Any) -> None:
    """The watched run against a diagnose run's recipe: recorded in its facts, the reports written
    again, and the recipe-gap verdict's line said."""
    from gcdoctor.engine import evaluate
    from gcdoctor.facts import Facts
    from gcdoctor.report import write_reports
    facts = Facts.load(out / "facts.json")
    facts.against = against
    facts.save(out / "facts.json")
    verdicts = evaluate(facts)
    write_reports(out, facts, verdicts)
    for v in verdicts:
        if v.code == "GC013" and (v.line or v.headline):
            print(f"gcdoctor watch: {v.line or v.headline}", file=sys.stderr)


def run_watch(args: Any) -> int:
    """`gcdoctor watch [--out DIR] [--profile-steps 5,6] [--telemetry-hz 20] [--ranks all|0] -- CMD ...`:
    run CMD with this process's environment plus gcdoctor's sitecustomize; return CMD's exit code."""
    from gcdoctor.errors import UserError
    from gcdoctor.run.rundir import default_run_dir
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UserError("watch: give the command to run after --, e.g. gcdoctor watch -- python train.py")
    try:
        prof = tuple(int(x) for x in args.profile_steps.split(",") if x.strip()) if args.profile_steps else (5, 6)
    except ValueError:
        raise UserError(f"--profile-steps {args.profile_steps!r}: comma-separated step numbers, e.g. 5,6") from None
    if any(p < 0 for p in prof):
        raise UserError(f"--profile-steps {args.profile_steps!r}: steps count from 0")
    hz = 20.0 if args.telemetry_hz is None else args.telemetry_hz
    if hz < 0 or hz > 1000:
        raise UserError(f"--telemetry-hz {hz:g}: use a rate between 0 (off) and 1000 Hz")
    against = None
    if getattr(args, "against", None):  # checked before the job runs: a typo costs no training time
        from gcdoctor.recipe_code import against_facts
        against = against_facts(args.against)
    out = Path(args.out) if args.out else default_run_dir("watch", Path(cmd[-1]).stem if cmd else None)
    if args.out:
        from gcdoctor.run.rundir import prepare_run_dir
        prepare_run_dir(out, getattr(args, "force", False))
    try:
        out = out.resolve()
        created = not out.exists()
        out.mkdir(parents=True, exist_ok=True)  # here, so that a read-only or odd place is one line now
        site = write_site(out.parent / f".{out.name}-site")
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create the run directory ({exc.strerror or exc})") from None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update({ENV_OUT: str(out), ENV_PROFILE: ",".join(map(str, prof)), ENV_TELEMETRY: f"{hz:g}",
                ENV_RANKS: args.ranks})
    log = out.parent / f".{out.name}-watch.log"  # moved into the run directory at the end
    try:
        rc = _run_logged(cmd, env, log)
    except FileNotFoundError:
        log.unlink(missing_ok=True)
        raise UserError(f"watch: command not found: {cmd[0]}") from None
    except PermissionError:
        log.unlink(missing_ok=True)
        raise UserError(f"watch: cannot run {cmd[0]}: permission denied (not an executable file?)") from None
    except OSError as exc:
        log.unlink(missing_ok=True)
        raise UserError(f"watch: cannot run {cmd[0]}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        rc = 130
    finally:
        import shutil
        shutil.rmtree(site, ignore_errors=True)
        if created and not log.exists():  # made only to check it could be: a job that never ran leaves no folder
            try:
                out.rmdir()  # only while still empty
            except OSError:
                pass
    return watch_exit_code(_conclude(out, rc, log, against, created))


LOG_NAME = "watch.log"
# lines the profiler prints from C++ that mean nothing to the user: kept in watch.log, off the console
QUIET = re.compile(rb"\bUSDT\b.*\bprofiler_(start|stop)\b|^STAGE:\d{4}-\d\d-\d\d .*ActivityProfilerController")


def _run_logged(cmd: list[str], env: dict[str, str], log: Path) -> int:
    """Run `cmd`, copying its stdout and stderr to ours (less the profiler's noise) and all of it to
    `log`. Lines end at a newline or a carriage return, so a progress bar still moves."""
    import subprocess
    import threading
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    lock = threading.Lock()
    with open(log, "wb") as fh:
        def pump(src: Any, dst: Any) -> None:
            pending = b""
            for chunk in iter(lambda: src.read1(65536) if hasattr(src, "read1") else src.read(65536), b""):
                pending += chunk
                parts = re.split(rb"(?<=[\n\r])", pending)
                pending = parts.pop()  # an unfinished line waits for its end
                for line in parts:
                    _emit(line, dst, fh, lock)
            if pending:
                _emit(pending, dst, fh, lock)

        threads = [threading.Thread(target=pump, args=(proc.stdout, sys.stdout.buffer), daemon=True),
                   threading.Thread(target=pump, args=(proc.stderr, sys.stderr.buffer), daemon=True)]
        for t in threads:
            t.start()
        try:
            rc = proc.wait()
        except KeyboardInterrupt:  # the child got the Ctrl-C too: let it write its run directory
            try:
                rc = proc.wait(timeout=60)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                proc.kill()
                rc = 130
            rc = 130 if rc in (0, -2) else rc
        for t in threads:
            t.join(timeout=5)
    return rc


def _emit(line: bytes, dst: Any, fh: Any, lock: Any) -> None:
    with lock:
        fh.write(line)
        if not QUIET.search(line):
            dst.write(line)
            dst.flush()


def _conclude(out: Path, rc: int, log: Path, against: Any = None, created: bool = False) -> int:
    """What `gcdoctor watch` ends with: the bottom line of the watched run (as `gcdoctor analyze`
    prints it) and where everything is; or, when nothing was watched, why. The command's whole output
    (profiler lines included) is kept as watch.log in the run directory whenever there is one or the
    command failed."""
    ranks = sorted(out.glob("rank-*/facts.json"))
    watched = (out / "facts.json").is_file() or bool(ranks)
    if log.exists():
        if watched or rc != 0:
            out.mkdir(parents=True, exist_ok=True)
            log.replace(out / LOG_NAME)
        else:
            log.unlink()
            if created:  # made only to check it could be: a job that never trained leaves no folder
                try:
                    out.rmdir()
                except OSError:
                    pass
    if not watched:
        why = f"the command exited with {rc}; its output: {out / LOG_NAME}" if rc else (
            "no process ran a training forward and optimizer step")
        print(f"gcdoctor watch: nothing was watched: {why}", file=sys.stderr)
        return rc
    if ranks and not (out / "facts.json").is_file():
        print(f"gcdoctor watch: {len(ranks)} rank directories under {out} (gcdoctor analyze {out} merges them)",
              file=sys.stderr)
    else:
        if against is not None:
            hold_against(out, against)
        print(f"gcdoctor watch: run directory {out} (gcdoctor analyze {out})", file=sys.stderr)
    from gcdoctor.recorded import open_recorded
    from gcdoctor.engine import evaluate
    from gcdoctor.report.console import summary
    try:
        facts = open_recorded(out)
    except Exception as exc:  # noqa: BLE001 - the run directory is kept whatever fails here; say so and go on
        print(f"gcdoctor watch: the run directory could not be read back ({exc})", file=sys.stderr)
        return rc
    report = out / "report.html" if (out / "report.html").is_file() else out
    print("\n" + summary(facts, evaluate(facts), str(report)), flush=True)
    print(f"the command's output: {out / LOG_NAME}" + (f" (it exited with {rc})" if rc else ""))
    return rc


def watch_exit_code(rc: int) -> int:
    """What `gcdoctor watch` returns for the watched command's exit status `rc` (docs/exit-codes.md):
    0 when it succeeded; 130 when it was interrupted (it exited 130, or died of SIGINT or SIGTERM);
    3 (incomplete: the watched run ended early) for any other failure, whose own code is said on
    stderr. 1 stays --fail-on's and 2 gcdoctor's own user errors, so a script's exit code is never
    read as either."""
    import signal
    if rc == 0:
        return 0
    if rc in (130, 143, -signal.SIGINT, -signal.SIGTERM):
        return 130
    how = f"died of signal {-rc}" if rc < 0 else f"exited with {rc}"
    print(f"gcdoctor watch: the command {how}: the watched run is incomplete (exit 3)", file=sys.stderr)
    return 3
