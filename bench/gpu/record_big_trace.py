"""Record a large real trace for the trace-analysis benchmark: full Llama-3-8B training steps
(32 layers, bf16, seq 4096, batch 1, layer checkpointing with gcdoctor's labels) under
torch.profiler with shapes recorded, as a user's own profiling session would.

    python bench/gpu/record_big_trace.py OUT.json [--steps 6]
"""
from __future__ import annotations

import argparse
import os

import torch

from gcdoctor.backends import get_backend
from gcdoctor.run.capture import TrainingStep, enable_layer_checkpointing
from gcdoctor.model.registry import build_model, load_spec

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--model", default="llama3-8b")
args = ap.parse_args()
b = get_backend("cuda")
model = build_model(load_spec(args.model), "bf16", b.device)
enable_layer_checkpointing(model)
step = TrainingStep(model, b, 1, 4096, "adamw")
step.run()
step.run()
with torch.profiler.profile(activities=b.profiler_activities(), record_shapes=True) as prof:
    for _ in range(args.steps):
        step.run()
        prof.step()
prof.export_chrome_trace(args.out)
print(f"trace {args.out}: {os.path.getsize(args.out) / 1e6:.0f} MB, {args.steps} steps")
