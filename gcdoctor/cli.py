"""Command line: arguments -> RunConfig -> a front end.

Exit codes (gcdoctor.errors, docs/exit-codes.md): 0 ok, 1 --fail-on fired, 2 user error (one line),
3 incomplete (a probe or a rule crashed, or a crash cut the run short), 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from gcdoctor.experiments import PROBE_NAMES
from gcdoctor.config import (RunConfig, load_toml, parse_batch_sizes, parse_probes, parse_size, parse_threshold,
                             validate_thresholds)
from gcdoctor.errors import (EXIT_FAIL_ON, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE,
                             IncompleteRun, UserError)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse's usage dump -> our one line
        raise UserError(f"{self.prog}: {message}")


def _positive_or_zero(text: str) -> int:
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return v


def _finite(lo_exclusive: float = 0.0) -> Any:
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(v) or v <= lo_exclusive:
            raise argparse.ArgumentTypeError(f"{text} must be a finite number above {lo_exclusive:g}")
        return v
    return parse


def _rate(off_allowed: bool = False) -> Any:
    """--telemetry-hz: a finite rate within the bounds RunConfig holds to (0: off, where allowed)."""
    from gcdoctor.config import MAX_TELEMETRY_HZ, MIN_TELEMETRY_HZ

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (off_allowed and v == 0) and not (math.isfinite(v) and MIN_TELEMETRY_HZ <= v <= MAX_TELEMETRY_HZ):
            raise argparse.ArgumentTypeError(f"{text}: use a rate from {MIN_TELEMETRY_HZ:g} to {MAX_TELEMETRY_HZ:g} Hz"
                                             + (" (0: off)" if off_allowed else ""))
        return v
    return parse


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")


def _add_fail_on(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fail-on", choices=["critical", "warning"],
                   help="exit 1 if a configuration verdict of this severity or worse fired (or a rule crashed)")
    p.add_argument("--fail-on-experiments", action="store_true",
                   help="--fail-on also judges the probes' experiment verdicts (variants gcdoctor tried)")


def _add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="--out names a finished run's directory: empty it first (without it, refused)")


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="embedded model name (see `gcdoctor models`) or a path to a config.json "
                                   "(default: llama3-8b on a GPU, tiny-llama on the CPU)")
    p.add_argument("--layers", type=_positive_int, help="truncate the decoder stack to N layers")
    p.add_argument("--device", help="auto (default), cpu, cuda, cuda:N, musa, musa:N; plan also takes a card: "
                                    "mtt-s4000, mtt-s5000, a100-40gb, a100-80gb, h100-80gb, h200")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], help="default bf16 on a GPU, fp32 on the CPU")
    p.add_argument("--seq-len", type=_positive_int, help="default 4096 on a GPU, 128 on the CPU")
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default=None)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="gcdoctor", description="Is gradient checkpointing doing what you think it does?")
    ap.add_argument("--version", action="store_true", help="print the version")
    sub = ap.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    d = sub.add_parser("diagnose", help="measure checkpointing on this device and judge it")
    _add_run_args(d)
    d.add_argument("--batch-sizes", help="fixed comma-separated batch sizes instead of the search")
    d.add_argument("--max-batch", type=_positive_int, help="upper bound of the batch search (default 256)")
    d.add_argument("--target-batch", type=_positive_int, help="the per-device batch you train at")
    d.add_argument("--global-batch", type=_positive_int,
                   help="the global batch you train at; the recipe may reach it with gradient accumulation")
    d.add_argument("--steps", type=_positive_int, help="measured steps per point (default 3)")
    d.add_argument("--warmup", type=_int, help="warm-up steps per point (default 1)")
    d.add_argument("--probes", help=f"comma-separated probes to run: {', '.join(PROBE_NAMES)} (default: all "
                   "that apply)")
    d.add_argument("--probe-layers", type=_positive_int, help="layers for the many-variant probes (default 4 on a GPU)")
    d.add_argument("--probe-batch", type=_positive_int, help="batch of the many-variant probes (default 1)")
    d.add_argument("--memory-limit", help="cap device memory for this run, e.g. 48GB (what-if, tests)")
    d.add_argument("--emulate-launch-us", type=float, metavar="N",
                   help="what-if: the granularity probe adds N us of host time per launching op")
    d.add_argument("--no-profile", action="store_true", help="do not profile (no traces, no trace metrics)")
    d.add_argument("--memory-snapshot", action="store_true",
                   help="record a memory snapshot at the sweep's peak point (open at pytorch.org/memory_viz)")
    d.add_argument("--telemetry-hz", type=_rate(), help="telemetry sampling rate (default 20)")
    d.add_argument("--out", help="run directory (default: a new folder under ./gcdoctor-runs/)")
    _add_force(d)
    d.add_argument("--config", help="TOML file with [run] settings and [thresholds.RULE] overrides")
    d.add_argument("--threshold", action="append", default=[], help="override a rule threshold: GC001.max_overhead_pct=40")
    d.add_argument("--no-tui", action="store_true", help="plain console output instead of the live TUI")
    d.add_argument("--seed", type=_int, help="random seed (default 0)")
    _add_fail_on(d)
    d.add_argument("--nproc", type=_positive_int,
                   help="run on N ranks of this host, one per device (FSDP2; under torchrun the ranks are found)")
    d.add_argument("--shard", choices=["fsdp2", "zero3"], help="several ranks: how the sweep shards (default fsdp2)")
    d.add_argument("--no-reshard", action="store_true",
                   help="several ranks, FSDP2: reshard_after_forward=False (keep gathered parameters for backward)")
    d.add_argument("--checkpoint-impl", choices=["transformers", "checkpoint_wrapper"],
                   help="several ranks, FSDP2: transformers' layer checkpointing (default) or checkpoint_wrapper")
    d.add_argument("-v", "--verbose", action="store_true")

    a = sub.add_parser("analyze", help="re-judge a recorded run directory or a profiler trace file")
    a.add_argument("path", help="a gcdoctor run directory, or a torch.profiler trace (.json or .json.gz)")
    a.add_argument("--out", help="where to write the reports (default: a new folder under ./gcdoctor-runs/)")
    _add_force(a)
    a.add_argument("--config", help="TOML file with [thresholds.RULE] overrides")
    a.add_argument("--threshold", action="append", default=[])
    a.add_argument("--against", metavar="DIAGNOSE_RUN",
                   help="a watched run: how far it is from this diagnose run's recipe (tokens/s and settings)")
    _add_fail_on(a)
    _add_json(a)

    _add_json(sub.add_parser("rules", help="list the rules"))
    e = sub.add_parser("explain", help="print one rule's documentation")
    e.add_argument("code", help="rule code (GC001) or slug (recompute-overhead)")
    _add_json(e)
    _add_json(sub.add_parser("models", help="list the embedded models"))

    pl = sub.add_parser("plan", help="predict peak memory and the largest batch before running")
    _add_run_args(pl)
    pl.add_argument("--device-memory", help="device memory, e.g. 48GB, 80GiB, 141e9 (default: the --device card's)")
    pl.add_argument("--batch-sizes", help="batch sizes to tabulate (default: powers of two up to the max)")
    pl.add_argument("--master-weights", choices=["none", "fp32"], default="none",
                    help="fp32 master weights and optimizer states (mixed precision)")
    pl.add_argument("--shard", type=_positive_int, help="also predict one rank of N with the states sharded (FSDP2)")
    pl.add_argument("--no-reshard", action="store_true", help="with --shard: parameters kept gathered for backward")
    _add_json(pl)
    pl.add_argument("--launch-us", type=float, metavar="N",
                    help="the card's launch cost for the step-time prediction (measured by diagnose --probes granularity)")
    pl.add_argument("--granularity-run", metavar="DIR",
                    help="a diagnose --probes granularity run to scale step times from (default: the recorded H200 run)")

    mo = sub.add_parser("monitor", help="live telemetry beside a training job (or a watched run directory)")
    mo.add_argument("--gpu", type=_positive_or_zero, help="only this GPU index (default: all)")
    mo.add_argument("--run", help="follow a run directory written by gcdoctor.watch / diagnose")
    mo.add_argument("--out", help="run directory to record to (default: a new folder under ./gcdoctor-runs/)")
    _add_force(mo)
    # 20 Hz, not less: NVIDIA's 32-bit PCIe byte counters are then read in the sampler's own tick;
    # a slower sampler needs a 50 Hz poller thread for them, which costs about twice the CPU
    mo.add_argument("--telemetry-hz", type=_rate(), default=20.0,
                    help="telemetry sampling rate (default 20; slower rates cost more CPU on NVIDIA)")
    mo.add_argument("--seconds", type=_finite(), help="stop after this long (default: until q / Ctrl-C)")
    mo.add_argument("--no-tui", action="store_true", help="print warnings to the console instead of the TUI")
    mo.add_argument("--json", action="store_true", help="with --no-tui: one JSON object a line (events.jsonl's format)")

    w = sub.add_parser("watch", help="watch an unmodified training script: gcdoctor watch -- python train.py ...")
    w.add_argument("--out", help="run directory (default: a new folder under ./gcdoctor-runs/)")
    _add_force(w)
    w.add_argument("--profile-steps", help="steps to profile, comma-separated (default 5,6)")
    w.add_argument("--telemetry-hz", type=_rate(off_allowed=True), help="telemetry sampling rate, 0 = off (default 20)")
    w.add_argument("--against", metavar="DIAGNOSE_RUN",
                   help="after the job: how far it is from this diagnose run's recipe (tokens/s and settings)")
    w.add_argument("--ranks", choices=["all", "0"], default="all",
                   help="distributed jobs: a run directory per rank (all, default) or rank 0 only")
    w.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- python train.py --lr 1e-4")

    r = sub.add_parser("recipe", help="the run's recipe as code: TrainingArguments, a PyTorch snippet or JSON")
    r.add_argument("run", help="a gcdoctor diagnose run directory (its facts.json)")
    r.add_argument("--format", choices=["pytorch", "hf", "json"], default="pytorch",
                   help="pytorch (default): a plain PyTorch snippet; hf: Hugging Face TrainingArguments and the "
                        "environment; json: for tools")

    c = sub.add_parser("compare", help="two runs side by side")
    c.add_argument("run_a")
    c.add_argument("run_b")
    c.add_argument("--html", help="also write an HTML comparison to this file")
    c.add_argument("--fail-on-regression", type=_finite(), metavar="PCT",
                   help="exit 1 if RUN_B is worse than RUN_A by more than PCT%% in step time, tokens/s, "
                        "peak memory or the largest batch")
    _add_json(c)
    return ap


def _thresholds(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    run: dict[str, Any] = {}
    th: dict[str, dict[str, float]] = {}
    if getattr(args, "config", None):
        run, th = load_toml(args.config)
    cli: dict[str, dict[str, float]] = {}
    for text in getattr(args, "threshold", []) or []:
        rule, name, value = parse_threshold(text)
        cli.setdefault(rule, {})[name] = value
    validate_thresholds(cli, "--threshold")
    for rule, values in cli.items():
        th.setdefault(rule, {}).update(values)
    return run, th


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """TOML [run] settings, overridden by the command line, checked once by RunConfig itself."""
    run, th = _thresholds(args)
    kw: dict[str, Any] = dict(run)
    simple = {"model": "model", "layers": "layers", "device": "device", "dtype": "dtype", "seq_len": "seq_len",
              "optimizer": "optimizer", "max_batch": "max_batch", "target_batch": "target_batch",
              "global_batch": "global_batch", "steps": "measure_steps", "warmup": "warmup_steps", "probe_layers": "probe_layers",
              "probe_batch": "probe_batch", "telemetry_hz": "telemetry_hz", "out": "out", "seed": "seed",
              "nproc": "nproc", "shard": "shard", "checkpoint_impl": "checkpoint_impl"}
    for arg, name in simple.items():
        v = getattr(args, arg, None)
        if v is not None:
            kw[name] = v
    if getattr(args, "batch_sizes", None):
        kw["batch_sizes"] = parse_batch_sizes(args.batch_sizes)
    if getattr(args, "probes", None) is not None:
        kw["probes"] = parse_probes(args.probes)
    if getattr(args, "memory_limit", None):
        kw["memory_limit_bytes"] = parse_size(args.memory_limit, "--memory-limit")
    if getattr(args, "no_profile", False):
        kw["profile"] = False
    if getattr(args, "emulate_launch_us", None) is not None:
        kw["emulate_launch_us"] = args.emulate_launch_us
    if getattr(args, "memory_snapshot", False):
        kw["memory_snapshot"] = True
    if getattr(args, "no_reshard", False):
        kw["reshard_after_forward"] = False
    if getattr(args, "force", False):
        kw["force"] = True
    kw["thresholds"] = th
    kw["tui"] = False if getattr(args, "no_tui", False) else None
    return RunConfig(**kw)


def incomplete_reasons(facts: Any, verdicts: list, live: bool = True, in_progress: str | None = None) -> list[str]:
    """Why a run is incomplete (exit code 3): a probe that failed, a rule that crashed, a crash,
    a diagnose run with no recorded end (killed: SIGKILL, power loss; or, `in_progress` the pid
    that holds its lock, still running) and, re-judged later (`live` False), a run that was
    interrupted."""
    reasons = [f"{k}: probe failed: {v}" for k, v in facts.failed_probes.items()]
    reasons += [f"rule {v.code} crashed" for v in verdicts if v.status == "error"]
    st = facts.settings
    if st.error:
        reasons.append(f"the run crashed: {st.error}")
    elif st.interrupted and not live:
        reasons.append("the run was interrupted: its results are partial")
    elif in_progress is not None and st.command != "analyze" and not st.finished_at:
        reasons.append(f"the run is still in progress (pid {in_progress}): judged on what it has measured so far")
    elif st.command == "diagnose" and st.started_at and not st.finished_at and not st.interrupted:
        reasons.append("the run has no recorded end (it was killed before it finished): its results are partial")
    return reasons


def run_exit_code(facts: Any, verdicts: list, fail_on: str | None, include_experiments: bool,
                  live: bool = True, in_progress: str | None = None) -> int:
    """The exit-code contract for a judged run (gcdoctor.errors): 130 > 3 > 1 > 0. `live`: the run
    happened in this process (diagnose), so its interruption is this command's."""
    from gcdoctor.engine import failing
    if live and facts.settings.interrupted:
        return EXIT_INTERRUPTED
    if incomplete_reasons(facts, verdicts, live, in_progress):
        return EXIT_INCOMPLETE
    return EXIT_FAIL_ON if failing(verdicts, fail_on, include_experiments) else EXIT_OK


def _say_incomplete(facts: Any, verdicts: list, live: bool = True, in_progress: str | None = None) -> None:
    for why in incomplete_reasons(facts, verdicts, live, in_progress):
        print(f"gcdoctor: incomplete: {_term(why)}", file=sys.stderr)


def _term(text: str) -> str:
    from gcdoctor.report.format import term_escape
    return term_escape(text)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=1, default=str))


def cmd_diagnose(args: argparse.Namespace) -> int:
    from gcdoctor.run.events import EventBus
    from gcdoctor.report.console import summary
    from gcdoctor.run.session import Session

    from gcdoctor.run.rundir import NativeOutputToLog

    cfg = config_from_args(args)
    from gcdoctor.run.distributed import LAUNCH_KEY
    if cfg.nproc is not None and not os.environ.get(LAUNCH_KEY):  # start the ranks (a config file's nproc
        # reaches the workers too: they are the ranks it asked for)
        from gcdoctor.run import distributed
        from gcdoctor.run.rundir import default_run_dir
        return distributed.spawn(cfg.nproc, args.argv[args.argv.index("diagnose") + 1:],
                                 cfg.out or str(default_run_dir("diagnose", cfg.model)))
    bus = EventBus()
    session = Session(cfg, bus)
    if session.dist is not None and not session.dist.is_main:  # rank 0 speaks for every rank
        session.run()
        return 130 if session.facts.settings.interrupted else 0
    use_tui = cfg.tui is not False and sys.stdout.isatty() and sys.stdin.isatty() and session.dist is None
    if use_tui:
        try:
            from gcdoctor.tui import run_diagnose_app
        except ImportError:
            use_tui = False
    # torch, Kineto and NCCL print from C++ to fd 2: into the run directory's gcdoctor.log
    with NativeOutputToLog(session.rundir.file("gcdoctor.log")):
        if use_tui:
            run_diagnose_app(session)
            verdicts = session.verdicts
        else:
            from gcdoctor.run.console import ConsolePrinter
            bus.subscribe(ConsolePrinter(verbose=args.verbose))
            verdicts = session.run()
    try:
        _log_rule_errors(session.rundir, verdicts)
    except OSError:
        pass
    print()
    print(summary(session.facts, verdicts, str(session.report_path)))
    _say_incomplete(session.facts, verdicts)
    if session.signalled:  # a signal while the run wrote its results: still this command's interruption
        return EXIT_INTERRUPTED
    return run_exit_code(session.facts, verdicts, args.fail_on, args.fail_on_experiments)


def _log_rule_errors(rundir: Any, verdicts: list) -> None:
    """A rule that raised is an `error` verdict; its traceback goes to the run directory's error.log."""
    from gcdoctor.engine import rule_errors_text
    text = rule_errors_text(verdicts)
    if text:
        rundir.write_error(text)


def cmd_analyze(args: argparse.Namespace) -> int:
    from gcdoctor.engine import evaluate
    from gcdoctor.report import write_reports
    from gcdoctor.report.console import summary
    from gcdoctor.report.json_report import render_json
    from gcdoctor.run.rundir import RunDirectory, default_run_dir, prepare_run_dir

    from gcdoctor.run.rundir import live_owner
    _, th = _thresholds(args)
    path = Path(args.path)
    against = None
    if args.against:
        from gcdoctor.recipe_code import against_facts
        against = against_facts(args.against)
    from gcdoctor.recorded import open_recorded
    facts = open_recorded(path)
    if against is not None:
        if facts.watch is None:
            raise UserError(f"--against: {path} is not a watched run (gcdoctor watch, or gcdoctor.watch in a script)")
        facts.against = against
    owner = live_owner(path) if path.is_dir() else None
    verdicts = evaluate(facts, overrides=th)
    out = Path(args.out) if args.out else default_run_dir("analyze", path.stem.split(".")[0])
    if args.out:
        if _same_place(out, path):
            raise UserError(f"--out {out}: is the run being analyzed; choose another directory")
        prepare_run_dir(out, args.force)
    rundir = RunDirectory(out, events=False)
    try:
        try:
            facts.save(out / "facts.json")
            report = write_reports(out, facts, verdicts, source_dir=path if path.is_dir() else None)
            _log_rule_errors(rundir, verdicts)
        except OSError as exc:
            raise UserError(f"--out {out}: cannot write the reports ({exc.strerror or exc})") from None
    finally:
        rundir.close()
    if args.json:
        data = render_json(facts, verdicts)
        data["report_path"] = str(report)
        _print_json(data)
    else:
        print(summary(facts, verdicts, str(report)))
    _say_incomplete(facts, verdicts, live=False, in_progress=owner)
    return run_exit_code(facts, verdicts, args.fail_on, args.fail_on_experiments, live=False, in_progress=owner)


def _same_place(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and a.resolve() == b.resolve()
    except OSError:
        return False


def cmd_recipe(args: argparse.Namespace) -> int:
    from gcdoctor.facts import Facts
    from gcdoctor.recipe_code import recipe_of, render
    from gcdoctor.recorded import RUN, TRACE, kind_of
    path = Path(args.run)
    kind = kind_of(path)
    if kind != RUN:
        if kind == TRACE or not path.is_dir():
            raise UserError(f"{path}: not a run directory (give the folder gcdoctor diagnose wrote)")
        raise UserError(f"{path}: no facts.json: not a gcdoctor run directory")
    facts = Facts.load(path / "facts.json")
    recipe = recipe_of(facts)
    if recipe is None:
        raise UserError(f"{path}: no recipe: no measured setting fits (see its report's bottom line)")
    sys.stdout.write(render(recipe, args.format))
    return EXIT_OK


def _rule_dict(rule: Any, doc: bool = False) -> dict[str, Any]:
    d = {"code": rule.code, "slug": rule.slug, "title": rule.title, "scope": getattr(rule, "scope", None),
         "thresholds": dict(rule.defaults), "requires": list(rule.requires)}
    if doc:
        d["doc"] = rule.doc()
    return d


def cmd_rules(args: argparse.Namespace) -> int:
    from gcdoctor.report.console import output_width, wrap
    from gcdoctor.rules import ALL_RULES
    rules = sorted(ALL_RULES, key=lambda r: r.code)  # ALL_RULES is in evaluation order
    if args.json:
        _print_json([_rule_dict(r) for r in rules])
        return EXIT_OK
    width = output_width()
    for r in rules:
        print("\n".join(wrap(f"{r.code}  {r.slug}: {r.title}", width, " " * 7, first="")))
        th = ", ".join(f"{k}={v:g}" for k, v in r.defaults.items())
        if th:
            print("\n".join(wrap(f"thresholds: {th}", width, " " * 7, first=" " * 7)))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from gcdoctor.rules import find_rule
    rule = find_rule(args.code)
    if rule is None:
        raise UserError(f"unknown rule {args.code!r} (see `gcdoctor rules`)")
    if args.json:
        _print_json(_rule_dict(rule, doc=True))
        return EXIT_OK
    from gcdoctor.report.console import output_width, wrap
    width = output_width()
    print("\n".join(wrap(f"{rule.code} {rule.slug}: {rule.title}", width, "  ", first="")) + "\n")
    for para in rule.doc().split("\n\n"):  # the docstring's paragraphs, rewrapped to the width
        lines = para.splitlines()
        if lines and lines[0].rstrip().endswith(":") and len(lines) > 1:  # a section heading
            print(lines[0].strip())
            lines = lines[1:]
        print("\n".join(wrap(" ".join(x.strip() for x in lines), width, "  ", first="  ")) + "\n")
    if rule.defaults:
        print("\n".join(wrap("Thresholds (override with --threshold CODE.name=value or [thresholds.CODE] in a "
                             "TOML file):", width)))
        for k, v in rule.defaults.items():
            print(f"  {k} = {v:g}")
    if rule.requires:
        print("\n".join(wrap(f"Needs facts: {', '.join(rule.requires)}", width, "  ", first="")))
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from gcdoctor.model.registry import load_spec, registry
    if args.json:
        out = []
        for name in sorted(registry()):
            s = load_spec(name)
            out.append({"name": name, "params": s.param_count(), "layers": s.n_layers, "hidden_size": s.hidden_size,
                        "heads": s.n_heads, "kv_heads": s.n_kv_heads, "vocab_size": s.vocab_size,
                        "source": s.config.get("_source", s.source)})
        _print_json(out)
        return EXIT_OK
    print(f"{'name':12s} {'params':>8s} {'layers':>6s} {'hidden':>6s} {'heads/kv':>8s} {'vocab':>7s}  source")
    for name in sorted(registry()):
        s = load_spec(name)
        print(f"{name:12s} {s.param_count() / 1e9:7.2f}B {s.n_layers:6d} {s.hidden_size:6d} "
              f"{s.n_heads:>4d}/{s.n_kv_heads:<3d} {s.vocab_size:7d}  {s.config.get('_source', s.source)}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from gcdoctor.model import plan
    text, data = plan.run_plan(args)
    if args.json:
        _print_json(data)
    else:
        print(text)
    return 0


def cmd_monitor(args: argparse.Namespace) -> int:
    if args.out:
        from gcdoctor.run.rundir import prepare_run_dir
        prepare_run_dir(args.out, args.force)
    from gcdoctor.monitor.session import run_monitor
    return run_monitor(args)


def cmd_watch(args: argparse.Namespace) -> int:
    from gcdoctor.watching.autowatch import run_watch
    return run_watch(args)


def cmd_compare(args: argparse.Namespace) -> int:
    from gcdoctor.report.compare import compare_json, compare_rows, load_run, run_compare
    from gcdoctor.report.regression import regressions
    pct = args.fail_on_regression
    if args.json:
        a, b = load_run(args.run_a), load_run(args.run_b)
        data = compare_json(a, b, pct)
        if args.html:
            from gcdoctor.report.compare import render_compare_html
            _write_text(Path(args.html), render_compare_html(a, b), "--html")
            data["html"] = args.html
        _print_json(data)
        return EXIT_FAIL_ON if data["regressions"] else EXIT_OK
    code = run_compare(args)
    if pct is None:
        return code
    a, b = load_run(args.run_a), load_run(args.run_b)
    worse = regressions(compare_rows(a, b), pct)
    from gcdoctor.report.console import wrap
    if worse:
        print(f"\nregressions beyond {pct:g}% in the measurements (B against A):")
        for r in worse:
            print("\n".join(wrap(f"{_term(r['group'])}: {_term(r['label'])}: {r['a']:g} -> {r['b']:g} "
                                  f"({r['worse_pct']:+.1f}% worse)", 80, "    ", first="  ")))
        return EXIT_FAIL_ON
    print(f"\nno regression beyond {pct:g}% in the measurements (predictions are not gated on)")
    return code


def _write_text(path: Path, text: str, flag: str) -> None:
    from gcdoctor.atomic import atomic_write_text
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None


COMMANDS = {"diagnose": cmd_diagnose, "analyze": cmd_analyze, "rules": cmd_rules, "explain": cmd_explain,
            "models": cmd_models, "plan": cmd_plan, "monitor": cmd_monitor, "compare": cmd_compare,
            "watch": cmd_watch, "recipe": cmd_recipe}


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _late_signals_exit_130() -> None:
    """After the command's work (entry): a Ctrl-C or SIGTERM until the process has left ends it
    with 130, not -2 or -15."""
    def bye(signum: int, frame: Any) -> None:
        try:
            sys.stdout.flush()
        finally:
            os._exit(EXIT_INTERRUPTED)
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, bye)
        except (ValueError, OSError):
            pass


def _crash(exc: BaseException) -> int:
    """An unexpected exception: one line on stderr, the traceback in the run directory (or in
    ./gcdoctor-runs/ when no run directory was opened), exit code 3."""
    from gcdoctor.run import rundir
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    where = None
    try:
        rd = rundir.current()
        if rd is not None and rd.path.is_dir():
            where = rd.write_error(text)
        else:
            from datetime import datetime
            d = Path("gcdoctor-runs")
            d.mkdir(exist_ok=True)
            where = d / f"crash-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
            where.write_text(text)
    except OSError:
        where = None
    msg = _term(str(exc).splitlines()[0] if str(exc) else "")[:300]
    kept = f"traceback in {where}" if where else "traceback could not be written"
    print(f"gcdoctor: internal error: {type(exc).__name__}: {msg} ({kept}); please report it", file=sys.stderr)
    return EXIT_INCOMPLETE


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
        if args.version:
            from gcdoctor import __version__
            print(f"gcdoctor {__version__}")
            return EXIT_OK
        if not args.command:
            parser.print_help()
            return EXIT_USAGE
        signal.signal(signal.SIGTERM, _sigterm)
        from gcdoctor.run.rundir import forget_current
        forget_current()
        return COMMANDS[args.command](args)
    except IncompleteRun as exc:
        print(f"gcdoctor: incomplete: {_term(str(exc))}", file=sys.stderr)
        return EXIT_INCOMPLETE
    except UserError as exc:
        if os.environ.get("RANK", "0") == "0":  # under a distributed launch rank 0 says it once
            print(f"gcdoctor: error: {_term(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("gcdoctor: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except ModuleNotFoundError as exc:
        return _missing_module(exc)
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, traceback kept
        if _interrupted(exc):
            print("gcdoctor: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        return _crash(exc)


def _interrupted(exc: BaseException) -> bool:
    """Whether `exc` only wraps a Ctrl-C/SIGTERM: a signal that lands while a module is being
    imported can surface as another error caused by the KeyboardInterrupt (a RuntimeError from a
    dataclass's __set_name__, say)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def entry() -> None:
    """The `gcdoctor` command: main(), then the exit, by the exit-code contract on every path out.

    SIGTERM is a Ctrl-C from the first line on. Once main() has returned, a SIGINT or SIGTERM ends
    the process with 130 at once (docs/exit-codes.md): the late handlers stay in place to the very
    end, because the process leaves without the interpreter's teardown (threads are joined and the
    atexit functions run first). That teardown (torch's, the threads') can take seconds, and in its
    last part Python has put the default handlers back, where a late signal would kill it with -2."""
    code = EXIT_INTERRUPTED
    try:
        signal.signal(signal.SIGTERM, _sigterm)
        code = main()
    except KeyboardInterrupt:  # a signal inside main()'s own error handling
        code = EXIT_INTERRUPTED
    finally:
        while True:  # a signal in this very window is one more interruption
            try:
                _late_signals_exit_130()
                break
            except KeyboardInterrupt:
                code = EXIT_INTERRUPTED
    _leave(code)


def _leave(code: int) -> NoReturn:
    """Exit with `code` as the interpreter would (threads joined, atexit run, output flushed), but
    without its teardown, so that the late-signal handlers hold to the end."""
    import atexit
    import threading
    try:
        shutdown = getattr(threading, "_shutdown", None)
        if shutdown is not None:
            shutdown()  # joins non-daemon threads and runs threading's exit hooks, as Py_Finalize does
        atexit._run_exitfuncs()
    except Exception:  # noqa: BLE001 - an exit hook that fails must not change the exit code
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


# what each optional package is for, for a one-line error when it is missing
_EXTRAS = {"torch": "run", "transformers": "run", "textual": "run", "rich": "run", "accelerate": "hf", "pandas": "pandas",
           "pynvml": "nvidia", "deepspeed": "deepspeed"}


def _missing_module(exc: ModuleNotFoundError) -> int:
    top = (exc.name or "").split(".")[0]
    if top not in _EXTRAS:
        return _crash(exc)
    what = "torch (see the README's set-up command)" if top == "torch" else f"gcdoctor[{_EXTRAS[top]}]"
    print(f"gcdoctor: error: this command needs {top}, which is not installed: install {what}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
