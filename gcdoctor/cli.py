"""Command line: arguments -> RunConfig -> a front end. User errors: one line, exit code 2."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from gcdoctor.config import (RunConfig, load_toml, parse_batch_sizes, parse_size, parse_threshold,
                             validate_thresholds)
from gcdoctor.errors import UserError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's usage dump -> our one line
        raise UserError(f"{self.prog}: {message}")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} must be positive")
    return v


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="embedded model name (see `gcdoctor models`) or a path to a config.json "
                                   "(default: llama3-8b on a GPU, tiny-llama on the CPU)")
    p.add_argument("--layers", type=_positive_int, help="truncate the decoder stack to N layers")
    p.add_argument("--device", help="auto (default), cpu, cuda, cuda:N, musa, musa:N")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], help="default bf16 on a GPU, fp32 on the CPU")
    p.add_argument("--seq-len", type=_positive_int, help="default 4096 on a GPU, 128 on the CPU")
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default=None)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="gcdoctor", description="Is gradient checkpointing doing what you think it does?")
    ap.add_argument("--version", action="store_true", help="print the version")
    sub = ap.add_subparsers(dest="command", parser_class=_Parser)

    d = sub.add_parser("diagnose", help="measure checkpointing on this device and judge it")
    _add_run_args(d)
    d.add_argument("--batch-sizes", help="fixed comma-separated batch sizes instead of the search")
    d.add_argument("--max-batch", type=_positive_int, help="upper bound of the batch search (default 256)")
    d.add_argument("--target-batch", type=_positive_int, help="the per-device batch you train at")
    d.add_argument("--steps", type=_positive_int, help="measured steps per point (default 3)")
    d.add_argument("--warmup", type=int, help="warm-up steps per point (default 1)")
    d.add_argument("--probes", help="comma-separated probes to run (default: all that apply)")
    d.add_argument("--probe-layers", type=_positive_int, help="layers for the many-variant probes (default 4 on a GPU)")
    d.add_argument("--probe-batch", type=_positive_int, help="batch of the many-variant probes (default 1)")
    d.add_argument("--memory-limit", help="cap device memory for this run, e.g. 48GB (what-if, tests)")
    d.add_argument("--emulate-launch-us", type=float, metavar="N",
                   help="what-if: the granularity probe adds N us of host time per launching op")
    d.add_argument("--no-profile", action="store_true", help="do not profile (no traces, no trace metrics)")
    d.add_argument("--telemetry-hz", type=float, help="telemetry sampling rate (default 20)")
    d.add_argument("--out", help="run directory (default: a new folder under ./gcdoctor-runs/)")
    d.add_argument("--config", help="TOML file with [run] settings and [thresholds.RULE] overrides")
    d.add_argument("--threshold", action="append", default=[], help="override a rule threshold: GC001.max_overhead_pct=40")
    d.add_argument("--no-tui", action="store_true", help="plain console output instead of the live TUI")
    d.add_argument("--seed", type=int, help="random seed (default 0)")
    d.add_argument("--fail-on", choices=["critical", "warning"],
                   help="exit 1 if a configuration verdict of this severity or worse fired")
    d.add_argument("--fail-on-experiments", action="store_true",
                   help="with --fail-on, count the probes' experiment verdicts too")
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
    a.add_argument("--config", help="TOML file with [thresholds.RULE] overrides")
    a.add_argument("--threshold", action="append", default=[])
    a.add_argument("--fail-on", choices=["critical", "warning"],
                   help="exit 1 if a configuration verdict of this severity or worse fired")
    a.add_argument("--fail-on-experiments", action="store_true",
                   help="with --fail-on, count the probes' experiment verdicts too")

    sub.add_parser("rules", help="list the rules")
    e = sub.add_parser("explain", help="print one rule's documentation")
    e.add_argument("code", help="rule code (GC001) or slug (recompute-overhead)")
    sub.add_parser("models", help="list the embedded models")

    pl = sub.add_parser("plan", help="predict peak memory and the largest batch before running")
    _add_run_args(pl)
    pl.add_argument("--device-memory", required=True, help="device memory, e.g. 48GB, 80GiB, 141e9")
    pl.add_argument("--batch-sizes", help="batch sizes to tabulate (default: powers of two up to the max)")
    pl.add_argument("--master-weights", choices=["none", "fp32"], default="none",
                    help="fp32 master weights and optimizer states (mixed precision)")
    pl.add_argument("--shard", type=_positive_int, help="also predict one rank of N with the states sharded (FSDP2)")
    pl.add_argument("--no-reshard", action="store_true", help="with --shard: parameters kept gathered for backward")
    pl.add_argument("--json", action="store_true", help="print JSON")
    pl.add_argument("--launch-us", type=float, metavar="N",
                    help="the card's launch cost for the step-time prediction (measured by diagnose --probes granularity)")
    pl.add_argument("--granularity-run", metavar="DIR",
                    help="a diagnose --probes granularity run to scale step times from (default: the recorded H200 run)")

    mo = sub.add_parser("monitor", help="live telemetry beside a training job (or a watched run directory)")
    mo.add_argument("--gpu", type=int, help="only this GPU index (default: all)")
    mo.add_argument("--run", help="follow a run directory written by gcdoctor.watch / diagnose")
    mo.add_argument("--out", help="run directory to record to (default: a new folder under ./gcdoctor-runs/)")
    # 20 Hz, not less: NVIDIA's 32-bit PCIe byte counters are then read in the sampler's own tick;
    # a slower sampler needs a 50 Hz poller thread for them, which costs about twice the CPU
    mo.add_argument("--telemetry-hz", type=float, default=20.0,
                    help="telemetry sampling rate (default 20; slower rates cost more CPU on NVIDIA)")
    mo.add_argument("--seconds", type=float, help="stop after this long (default: until q / Ctrl-C)")
    mo.add_argument("--no-tui", action="store_true", help="print warnings to the console instead of the TUI")

    w = sub.add_parser("watch", help="watch an unmodified training script: gcdoctor watch -- python train.py ...")
    w.add_argument("--out", help="run directory (default: a new folder under ./gcdoctor-runs/)")
    w.add_argument("--profile-steps", help="steps to profile, comma-separated (default 5,6)")
    w.add_argument("--telemetry-hz", type=float, help="telemetry sampling rate, 0 = off (default 20)")
    w.add_argument("--ranks", choices=["all", "0"], default="all",
                   help="distributed jobs: a run directory per rank (all, default) or rank 0 only")
    w.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command, e.g. -- python train.py --lr 1e-4")

    c = sub.add_parser("compare", help="two runs side by side")
    c.add_argument("run_a")
    c.add_argument("run_b")
    c.add_argument("--html", help="also write an HTML comparison to this file")
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
    run, th = _thresholds(args)
    cfg = RunConfig(**run)
    cfg.thresholds = th
    simple = {"model": "model", "layers": "layers", "device": "device", "dtype": "dtype", "seq_len": "seq_len",
              "optimizer": "optimizer", "max_batch": "max_batch", "target_batch": "target_batch",
              "steps": "measure_steps", "warmup": "warmup_steps", "probe_layers": "probe_layers",
              "probe_batch": "probe_batch", "telemetry_hz": "telemetry_hz", "out": "out", "seed": "seed",
              "nproc": "nproc", "shard": "shard", "checkpoint_impl": "checkpoint_impl"}
    for arg, field in simple.items():
        v = getattr(args, arg, None)
        if v is not None:
            setattr(cfg, field, v)
    if args.batch_sizes:
        cfg.batch_sizes = parse_batch_sizes(args.batch_sizes)
    if args.probes:
        cfg.probes = [p.strip() for p in args.probes.split(",") if p.strip()]
    if args.memory_limit:
        cfg.memory_limit_bytes = parse_size(args.memory_limit, "--memory-limit")
    if args.no_profile:
        cfg.profile = False
    if getattr(args, "emulate_launch_us", None) is not None:
        cfg.emulate_launch_us = args.emulate_launch_us
    if cfg.emulate_launch_us is not None and not 0 <= cfg.emulate_launch_us <= 100_000:
        raise UserError(f"--emulate-launch-us {cfg.emulate_launch_us:g}: use 0 to 100000 microseconds")
    if getattr(args, "no_reshard", False):
        cfg.reshard_after_forward = False
    if cfg.telemetry_hz <= 0 or cfg.telemetry_hz > 1000:
        raise UserError(f"--telemetry-hz {cfg.telemetry_hz}: use a rate between 0 and 1000 Hz")
    if isinstance(cfg.memory_limit_bytes, str):
        cfg.memory_limit_bytes = parse_size(cfg.memory_limit_bytes, "memory_limit_bytes")
    cfg.tui = False if args.no_tui else None
    return cfg


def _exit_code(verdicts: list, args: argparse.Namespace) -> int:
    from gcdoctor.engine import failing
    return 1 if failing(verdicts, args.fail_on, getattr(args, "fail_on_experiments", False)) else 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from gcdoctor.events import EventBus
    from gcdoctor.report.console import summary
    from gcdoctor.session import Session

    cfg = config_from_args(args)
    from gcdoctor.distributed import LAUNCH_KEY
    if cfg.nproc is not None and not os.environ.get(LAUNCH_KEY):  # start the ranks (a config file's nproc
        # reaches the workers too: they are the ranks it asked for)
        from gcdoctor import distributed
        from gcdoctor.rundir import default_run_dir
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
    if use_tui:
        run_diagnose_app(session)
        verdicts = session.verdicts
    else:
        from gcdoctor.console import ConsolePrinter
        bus.subscribe(ConsolePrinter(verbose=args.verbose))
        verdicts = session.run()
    print()
    print(summary(session.facts, verdicts, str(session.report_path)))
    return 130 if session.facts.settings.interrupted else _exit_code(verdicts, args)


def cmd_analyze(args: argparse.Namespace) -> int:
    from gcdoctor.engine import evaluate
    from gcdoctor.facts import Facts
    from gcdoctor.report import write_reports
    from gcdoctor.report.console import summary
    from gcdoctor.rundir import default_run_dir

    _, th = _thresholds(args)
    path = Path(args.path)
    if path.is_dir() and not (path / "facts.json").is_file():
        from gcdoctor.ranks import rank_dirs
        if rank_dirs(path):  # a distributed watched run: rank-<r> run directories
            from gcdoctor.ranks import merge_ranks
            facts = merge_ranks(path)
        else:  # a folder of per-rank traces (torch's tensorboard_trace_handler, HTA's layout)
            from gcdoctor.trace.ranks import facts_from_trace_dir
            facts = facts_from_trace_dir(path)
    elif path.is_dir():
        facts_path = path / "facts.json"
        try:
            facts = Facts.load(facts_path)
        except (ValueError, TypeError, KeyError) as exc:
            raise UserError(f"{facts_path}: not a valid gcdoctor facts file ({exc})") from None
        from gcdoctor.trace.launch_response import fill_missing_whatif
        fill_missing_whatif(facts, path)  # a run recorded before the what-if: derived from its own traces
    elif path.is_file():
        from gcdoctor.trace import facts_from_trace
        facts = facts_from_trace(path)
    else:
        raise UserError(f"{path}: no such file or directory")
    verdicts = evaluate(facts, overrides=th)
    out = Path(args.out) if args.out else default_run_dir("analyze", path.stem.split(".")[0])
    out.mkdir(parents=True, exist_ok=True)
    facts.save(out / "facts.json")
    report = write_reports(out, facts, verdicts, source_dir=path if (path / "facts.json").is_file() else None)
    print(summary(facts, verdicts, str(report)))
    return _exit_code(verdicts, args)


def cmd_rules(args: argparse.Namespace) -> int:
    from gcdoctor.report.console import output_width, wrap
    from gcdoctor.rules import ALL_RULES
    width = output_width()
    for r in ALL_RULES:
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
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from gcdoctor.models import load_spec, registry
    print(f"{'name':12s} {'params':>8s} {'layers':>6s} {'hidden':>6s} {'heads/kv':>8s} {'vocab':>7s}  source")
    for name in sorted(registry()):
        s = load_spec(name)
        print(f"{name:12s} {s.param_count() / 1e9:7.2f}B {s.n_layers:6d} {s.hidden_size:6d} "
              f"{s.n_heads:>4d}/{s.n_kv_heads:<3d} {s.vocab_size:7d}  {s.config.get('_source', s.source)}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from gcdoctor import plan
    text, data = plan.run_plan(args)
    if args.json:
        import json
        print(json.dumps(data, indent=1))
    else:
        print(text)
    return 0


def cmd_monitor(args: argparse.Namespace) -> int:
    from gcdoctor.tui.monitor import run_monitor
    return run_monitor(args)


def cmd_watch(args: argparse.Namespace) -> int:
    from gcdoctor.autowatch import run_watch
    return run_watch(args)


def cmd_compare(args: argparse.Namespace) -> int:
    from gcdoctor.report.compare import run_compare
    return run_compare(args)


COMMANDS = {"diagnose": cmd_diagnose, "analyze": cmd_analyze, "rules": cmd_rules, "explain": cmd_explain,
            "models": cmd_models, "plan": cmd_plan, "monitor": cmd_monitor, "compare": cmd_compare,
            "watch": cmd_watch}


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
        if args.version:
            from gcdoctor import __version__
            print(f"gcdoctor {__version__}")
            return 0
        if not args.command:
            parser.print_help()
            return EXIT_USAGE
        signal.signal(signal.SIGTERM, _sigterm)
        return COMMANDS[args.command](args)
    except UserError as exc:
        if os.environ.get("RANK", "0") == "0":  # under a distributed launch rank 0 says it once
            print(f"gcdoctor: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("gcdoctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
