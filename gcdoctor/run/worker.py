"""The fresh process of the allocator probe and the recipe's confirmation:
`python -m gcdoctor.run.worker WORK.json` measures the batches WORK.json names in a process of its own
(a new allocator, a given PYTORCH_CUDA_ALLOC_CONF, the model built again) and writes result.json
beside it. `probes/allocator.py`'s `run_worker` starts it and reads the result."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

from gcdoctor.facts import Measurement
from gcdoctor.facts.policies import POLICY_NONE
from gcdoctor.facts.serde import to_dict
from gcdoctor.model.allocator import alloc_conf_env
from gcdoctor.run.capture import _causal_lm_loss


def recipe_step_factory(model: Any, work: dict[str, Any], backend: Any) -> Callable[..., Any] | None:
    """For the fresh-process worker: apply the work's setting to `model` and return the forward
    (loss) function its steps run, accumulation included; None without a setting."""
    setting = work.get("setting")
    if not setting:
        return None
    from gcdoctor.probes import _policies
    _policies.apply_policy(model, setting.get("policy", POLICY_NONE), device_kind=backend.kind)
    loss_fn = _policies.chunked_causal_lm_loss if setting.get("chunked_loss") else None
    loss_fn = loss_fn or _causal_lm_loss
    acc = int(work.get("accumulation") or 1)
    if acc <= 1:
        return loss_fn

    def accumulate(model: Any, input_ids: Any) -> Any:
        # the accumulated micro-batches but the last: forward and backward each (the gradients sum);
        # the step's own backward runs the last
        for _ in range(acc - 1):
            (loss_fn(model, input_ids) / acc).backward()
        return loss_fn(model, input_ids) / acc
    return accumulate


def worker(work_path: str) -> int:
    """Measure the batches of WORK.json in this (fresh) process; write result.json beside it.

    mode "list": each batch in order. mode "boundary": from the first batch, up by one while it
    fits (to `high`), or down by one until one fits (to `low`); at most `max_trials` points."""
    work = json.loads(Path(work_path).read_text())
    from gcdoctor.run.capture import TrainingStep, enable_layer_checkpointing
    from gcdoctor.config import RunConfig
    from gcdoctor.run.session import ProbeContext, Session

    known = {f.name for f in fields(RunConfig)}
    # the worker's own run directory is a fresh folder beside WORK.json: the folder WORK.json is in
    # is not empty, and a run directory that is not empty is refused (it would mix two runs)
    settings = {k: v for k, v in work["config"].items() if k in known}
    settings["out"] = str(Path(work_path).parent / "run")
    cfg = RunConfig(**settings)
    session = Session(cfg)
    session.bus.subscribe(session.rundir.on_event)
    ctx = ProbeContext(session)
    session.current_probe = "allocator"
    from gcdoctor.run.events import PhaseTimed, process_age_s
    startup = process_age_s()
    if startup is not None:  # imports and device set-up of this fresh process
        session.bus.emit(PhaseTimed("allocator", "start-up", startup, "fresh process"))
    variant = work["variant"]
    measured: list[Measurement] = []
    with session.backend.tracking():
        model = ctx.build_model(init=work.get("init", "fast"))  # values do not matter for fit and time
        if hasattr(session.backend, "track"):
            session.backend.track([*model.parameters(), *model.buffers()])
        if variant == "gc":
            enable_layer_checkpointing(model)
        # a recipe (the policies probe): its checkpointing policy, loss and accumulation
        forward = recipe_step_factory(model, work, session.backend)

        def measure(batch: int, steps: int | None = None) -> Measurement:
            m = ctx.measure("allocator", variant, lambda: TrainingStep(
                model, session.backend, batch, ctx.seq_len, work.get("optimizer") or cfg.optimizer, cfg.seed,
                forward=forward), batch, steps=steps)
            measured.append(m)
            return m

        if work["mode"] == "list":
            for b in work["batches"]:
                measure(b)
        else:
            b, low, high = work["batches"][0], work["low"], work["high"]
            going_up = measure(b).fits
            while len(measured) < work["max_trials"]:
                b = b + 1 if going_up else b - 1
                if b > high or b < max(low, 1):
                    break
                # past the first point only fit or OOM is asked: the warm-up and one timed step (the
                # second step, the first with the optimizer states beside the activations: its peak is
                # the one every later step repeats; a lone first step is below it)
                fits = measure(b, steps=1).fits
                if fits != going_up:
                    break
    non_alloc = getattr(session.backend, "non_allocator_bytes", None)
    result = {"measurements": [to_dict(m) for m in measured],
              "alloc_conf": os.environ.get(alloc_conf_env(session.backend.kind), ""),
              "context_bytes": non_alloc() if non_alloc is not None else None}
    tmp = Path(work_path).with_name("result.json.tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(tmp.with_name("result.json"))
    session.rundir.close()
    return 0


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1]))
