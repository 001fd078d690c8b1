"""Measure the device's launch cost on its own (the numbers the granularity probe stores):
tiny-kernel launch, host enqueue, graph replay per op, and the host cost of checkpoint regions.

    python bench/launch_cost.py OUT_DIR [--device cuda] [--repeats 5]

Prints a compact table and writes OUT_DIR/launch_cost.json (LaunchCost, unavailable reasons and
the environment).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from gcdoctor.backends import get_backend
from gcdoctor.facts.serde import to_dict
from gcdoctor.probes.launch_cost import measure_launch_cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="directory for launch_cost.json")
    ap.add_argument("--device", default=None, help="cpu, cuda, cuda:N, musa (default: auto)")
    ap.add_argument("--repeats", type=int, default=None, help="timed loops per number")
    args = ap.parse_args()
    backend = get_backend(args.device)
    lc, unavailable = measure_launch_cost(backend, repeats=args.repeats)
    env = backend.describe()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "launch_cost.json").write_text(json.dumps(
        {"environment": to_dict(env), "launch": to_dict(lc), "unavailable": unavailable}, indent=1))

    def us(x: float | None) -> str:
        return "n/a" if x is None else f"{x:9.2f} us"

    print(f"{env.device_name} ({env.device_kind}), torch {env.torch}")
    print(f"  tiny-kernel launch (synchronised)   {us(lc.launch_us)}   x{lc.launches} x{lc.repeats}")
    print(f"  host enqueue per launch call        {us(lc.enqueue_us)}")
    print(f"  graph replay per op                 {us(lc.graph_replay_us_per_op)}   "
          f"{lc.graph_api or unavailable.get('granularity.launch.graph_replay_us_per_op', '')}")
    for p in lc.region_points:
        print(f"  checkpoint region '{p.name}' ({p.forward_ops} fwd ops, {p.recomputed_ops} recomputed): "
              f"{us(p.extra_us)} extra ({us(p.checkpoint_us)} vs {us(p.plain_us)} plain)")
    print(f"  region host cost = {us(lc.region_fixed_us)} + {us(lc.region_per_op_us)} per forward op")
    print(f"  -> {args.out / 'launch_cost.json'}")


if __name__ == "__main__":
    main()
