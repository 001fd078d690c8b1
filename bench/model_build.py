"""Seconds to build a model: the model's own random initialisation vs the fast build (meta device,
`to_empty`, a seeded tile fill), each in a fresh process, with one training step's time after it.

    python bench/model_build.py [--model llama3-8b --layers 2] [--repeat 3] [--device cpu]

Prints one line per (model, init): median build seconds, first-step seconds and its loss.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

WORKER = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
torch.set_num_threads(int(sys.argv[6]))
from gcdoctor.model import registry as models
from gcdoctor.run.capture import TrainingStep
from gcdoctor.backends import get_backend
t1 = time.perf_counter()
model_name, layers, init, device, dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
spec = models.load_spec(model_name, layers=layers or None)
t2 = time.perf_counter()
model = models.build_model(spec, dtype, device, init=init)
t3 = time.perf_counter()
backend = get_backend(device)
step = TrainingStep(model, backend, 1, 64, "sgd", 0)
rec = step.run()
t4 = time.perf_counter()
json.dump({"import_s": t1 - t0, "build_s": t3 - t2, "first_step_s": t4 - t3, "loss": rec.loss}, sys.stdout)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", help="registry name (repeatable); default tiny-llama and "
                                                      "llama3-8b with --layers")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers of llama3-8b (default 2)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: on a shared machine "
                                                            "two spinning threads can stall for minutes)")
    ap.add_argument("--out", help="write the results as JSON")
    a = ap.parse_args()
    cases = [(m, a.layers if m != "tiny-llama" else 0) for m in (a.model or ["tiny-llama", "llama3-8b"])]
    results = []
    print(f"{'model':22} {'init':7} {'build s':>8} {'step s':>7} {'loss':>8}   ({a.repeat} runs, median)")
    for model, layers in cases:
        for init in ("random", "fast"):
            runs = []
            for _ in range(a.repeat):
                r = subprocess.run([sys.executable, "-c", WORKER, model, str(layers), init, a.device, a.dtype,
                                    str(a.threads)],
                                   capture_output=True, text=True)
                if r.returncode:
                    raise SystemExit(r.stderr[-2000:])
                runs.append(json.loads(r.stdout))
            med = {k: statistics.median(x[k] for x in runs) for k in ("build_s", "first_step_s", "import_s")}
            label = f"{model}" + (f" ({layers} layers)" if layers else "")
            print(f"{label:22} {init:7} {med['build_s']:8.2f} {med['first_step_s']:7.2f} {runs[0]['loss']:8.3f}")
            results.append({"model": model, "layers": layers, "init": init, **med, "runs": runs})
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"device": a.device, "dtype": a.dtype, "results": results}, fh, indent=1)


if __name__ == "__main__":
    main()
