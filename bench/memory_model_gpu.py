"""Check the analytic memory model (gcdoctor.model.memory) against measured peaks on a GPU.

    python bench/memory_model_gpu.py --out samples/memory-model/h200-llama3-8b

Llama-3-8B (all 32 layers), bf16, seq 4096, AdamW (foreach), layer checkpointing off and on,
measured with gcdoctor's own step (gcdoctor.run.capture.TrainingStep: a warm-up step, then a
measured one; peaks reset at the step start). Batch sizes: the ones asked for plus the
predicted largest batch and the one after it, so the largest batch is settled by a fit and an
OOM; a surprise (an OOM before the prediction, or a fit after it) is bisected. Prints predicted
vs measured per point and the largest batch each way; writes `memory_model_gpu.json` with
everything, including

- a census of the tensors autograd saves per decoder layer (no GC, batch 1) against the
  formula, which shows whether SDPA kept K/V at kv-head width (enable_gqa) or repeated them;
- for a few points, the CUDA allocator's history around the peak: the largest live blocks at
  the peak with the Python frame that allocated them (what to look at when a term is off).

One model per variant, reused across batch sizes as the batch-sweep probe does (optimizer
state and grads are released after every point, and the allocator is emptied). About 3-4
minutes on an H200. `--device cpu` runs the same logic on the CPU backend (a smoke test:
`--model tiny-llama --seq-len 64 --memory-limit 30MB`).
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import time
from pathlib import Path
from typing import Any


from gcdoctor.model import memory as M  # noqa: E402
from gcdoctor.model.registry import load_spec  # noqa: E402

GiB = M.GiB


# -- measuring -----------------------------------------------------------------------------------

def _backend(device: str):
    from gcdoctor.backends import get_backend
    return get_backend(device)


def _tracking(backend, model):
    import contextlib
    if backend.kind == "cpu":
        return backend.tracking(*model.parameters(), *model.buffers())
    return contextlib.nullcontext()


def build(spec, dtype: str, backend, gc_on: bool):
    from gcdoctor.run.capture import enable_layer_checkpointing
    from gcdoctor.model.registry import build_model
    model = build_model(spec, dtype, backend.device)
    api = enable_layer_checkpointing(model, labelled=False) if gc_on else None
    return model, api


def _free(backend) -> None:
    gc.collect()
    backend.empty_cache()


def layer_census(model, step) -> dict[str, Any]:
    """Run one step with a saved-tensor hook that attributes each saved storage to the decoder
    layer (or the head/loss) being run; parameters and the shared RoPE tables are left out."""
    import torch
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    where = {"now": "embedding"}
    saved: dict[str, dict[int, tuple[int, tuple, str]]] = {}
    handles = []
    for i, layer in enumerate(model.model.layers):
        handles.append(layer.register_forward_pre_hook(lambda mod, args, i=i: where.__setitem__("now", f"layer{i}")))
    handles.append(model.model.norm.register_forward_pre_hook(lambda mod, args: where.__setitem__("now", "head+loss")))
    rope = set()
    handles.append(model.model.rotary_emb.register_forward_hook(
        lambda mod, args, out: rope.update(t.untyped_storage().data_ptr() for t in out)))

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in params and ptr not in rope:
            saved.setdefault(where["now"], {}).setdefault(ptr, (st.nbytes(), tuple(t.shape), str(t.dtype)))
        return t

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            step.run()
    finally:
        for h in handles:
            h.remove()
    out = {k: sum(v[0] for v in d.values()) for k, d in saved.items()}
    out["layer0_tensors"] = [list(v) for v in saved.get("layer0", {}).values()]
    return out


def _history_start() -> bool:
    import torch
    try:
        torch.cuda.memory._record_memory_history(max_entries=400000, stacks="python")
        return True
    except Exception:  # noqa: BLE001 - private API; the summary is optional
        return False


def _history_stop_and_summarize(top: int = 25) -> dict[str, Any] | None:
    """Replay the allocator's trace of the last step: its peak and the largest live blocks
    there, each with the innermost frames of the Python code that allocated it."""
    import torch
    try:
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
    except Exception as exc:  # noqa: BLE001
        return {"error": str(exc)[:200]}
    traces = snap.get("device_traces") or [[]]
    events = traces[0]
    live: dict[int, tuple[int, list]] = {}
    total = peak = 0
    peak_live: dict[int, tuple[int, list]] = {}
    marks = []
    for ev in events:
        action = ev.get("action")
        if action == "alloc":
            live[ev["addr"]] = (ev["size"], ev.get("frames") or [])
            total += ev["size"]
            if total > peak:
                peak = total
                marks.append(len(live))
                peak_live = dict(live)
        elif action in ("free_completed",) and ev["addr"] in live:
            total -= live.pop(ev["addr"])[0]
    rows = []
    for size, frames in sorted(peak_live.values(), key=lambda x: -x[0])[:top]:
        fr = [f"{Path(f.get('filename', '?')).name}:{f.get('line', 0)} {f.get('name', '?')}"
              for f in frames if "torch/utils/_" not in f.get("filename", "")][:4]
        rows.append({"bytes": size, "frames": fr})
    return {"events": len(events), "traced_peak_bytes_above_start": peak, "top_live_at_peak": rows}


def measure_point(model, backend, spec, variant: str, batch: int, seq_len: int, optimizer: str,
                  census: bool = False, history: bool = False) -> dict[str, Any]:
    """Warm-up step, then one measured step of gcdoctor's TrainingStep; OOM is a result."""
    from gcdoctor.run.capture import TrainingStep, optimizer_state_bytes, tensor_bytes
    res: dict[str, Any] = {"variant": variant, "batch_size": batch, "seq_len": seq_len, "fits": True}
    _free(backend)
    res["allocated_before_bytes"] = backend.memory_allocated()
    step = None
    phase = "setup"
    t0 = time.perf_counter()
    try:
        step = TrainingStep(model, backend, batch, seq_len, optimizer)
        if census:
            res["census"] = layer_census(model, step)  # doubles as the warm-up
        else:
            step.run()
        recording = history and backend.kind == "cuda" and _history_start()
        rec = step.run()
        if recording:
            res["history"] = _history_stop_and_summarize()
        res.update(
            step_ms=rec.step_ms, peak_allocated_bytes=rec.peak_allocated_bytes,
            peak_fwd_bwd_allocated_bytes=rec.peak_fwd_bwd_allocated_bytes,
            peak_optimizer_allocated_bytes=rec.peak_optimizer_allocated_bytes,
            peak_reserved_bytes=rec.peak_reserved_bytes, baseline_allocated_bytes=rec.baseline_allocated_bytes,
            activation_after_forward_bytes=rec.activation_after_forward_bytes,
            param_bytes=tensor_bytes(model.parameters()),
            optimizer_state_bytes=optimizer_state_bytes(step.optimizer),
        )
    except Exception as exc:  # noqa: BLE001 - OOM is a measurement; anything else is re-raised
        if not backend.is_oom(exc):
            raise
        phase = step.phase if step is not None else "setup"
        res.update(fits=False, oom_phase=phase, error=str(exc).splitlines()[0][:200])
        if backend.kind == "cuda":
            try:
                import torch
                torch.cuda.memory._record_memory_history(enabled=None)
            except Exception:  # noqa: BLE001
                pass
    finally:
        if step is not None:
            step.release()
        step = None
    _free(backend)
    res["allocated_after_bytes"] = backend.memory_allocated()
    res["seconds"] = time.perf_counter() - t0
    return res


# -- comparing -----------------------------------------------------------------------------------

def predicted(spec, variant: str, batch: int, seq_len: int, dtype: str, optimizer: str, device: str) -> dict[str, Any]:
    p = M.predict(spec, M.Workload(batch, seq_len, dtype, optimizer, variant == "gc", device))
    return {"peak_bytes": p.peak_bytes, "fwd_bwd_bytes": p.fwd_bwd.bytes, "optimizer_bytes": p.optimizer.bytes,
            "baseline_bytes": p.baseline_bytes, "after_forward_bytes": p.activations_after_forward_bytes,
            "where": p.peak.where, "fwd_bwd_where": p.fwd_bwd.where, "breakdown": p.peak.breakdown}


def _err(pred: int | None, meas: int | None) -> float | None:
    return None if pred is None or not meas else 100.0 * (pred - meas) / meas


def compare(point: dict[str, Any], pred: dict[str, Any]) -> dict[str, Any]:
    """Predicted minus measured, in percent of measured, for each comparable number."""
    if not point.get("fits"):
        return {}
    return {
        "peak_pct": _err(pred["peak_bytes"], point["peak_allocated_bytes"]),
        "fwd_bwd_pct": _err(pred["fwd_bwd_bytes"], point["peak_fwd_bwd_allocated_bytes"]),
        "optimizer_pct": _err(pred["optimizer_bytes"], point["peak_optimizer_allocated_bytes"]),
        "baseline_pct": _err(pred["baseline_bytes"], point["baseline_allocated_bytes"]),
        "after_forward_pct": _err(pred["after_forward_bytes"], point["activation_after_forward_bytes"]),
    }


def measured_max_batch(points: list[dict[str, Any]], variant: str) -> tuple[int | None, bool]:
    """Largest batch that fit, and whether the next batch was seen to OOM (then it is exact)."""
    fits = {p["batch_size"] for p in points if p["variant"] == variant and p["fits"]}
    ooms = {p["batch_size"] for p in points if p["variant"] == variant and not p["fits"]}
    best = max(fits) if fits else 0
    return best, (best + 1) in ooms or (best == 0 and 1 in ooms)


# -- the run -------------------------------------------------------------------------------------

def _environment(backend) -> dict[str, Any]:
    import torch
    import transformers
    env = {"device": backend.device_name(), "kind": backend.kind, "torch": torch.__version__,
           "transformers": transformers.__version__, "python": platform.python_version(),
           "total_memory_bytes": backend.total_memory(), "memory_limit_bytes": backend.memory_limit()}
    if backend.kind == "cuda":
        free, total = torch.cuda.mem_get_info()
        env.update(cuda=torch.version.cuda, free_at_start_bytes=free, mem_get_info_total_bytes=total,
                   flash_sdp=torch.backends.cuda.flash_sdp_enabled(),
                   mem_efficient_sdp=torch.backends.cuda.mem_efficient_sdp_enabled(),
                   cudnn_sdp=getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: None)())
    return env


def run(out: Path, model_name: str = "llama3-8b", seq_len: int = 4096, dtype: str = "bf16",
        optimizer: str = "adamw", device: str = "cuda", no_gc_batches: list[int] | None = None,
        gc_batches: list[int] | None = None, history_points: set[tuple[str, int]] | None = None,
        memory_limit: int | None = None, layers: int | None = None, max_extra: int = 8) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    backend = _backend(device)
    if memory_limit:
        backend.set_memory_limit(memory_limit)
    kind = backend.kind
    spec = load_spec(model_name, layers)
    env = _environment(backend)
    capacity = memory_limit or backend.total_memory()
    usable = M.usable_bytes(capacity, kind) if capacity else None
    asked = {"no_gc": no_gc_batches or [1, 2], "gc": gc_batches or [1, 2, 4, 8]}
    history_points = history_points if history_points is not None else {("no_gc", 1), ("gc", 1), ("gc", 8)}
    result: dict[str, Any] = {"environment": env, "model": spec.name, "n_layers": spec.n_layers, "seq_len": seq_len,
                              "dtype": dtype, "optimizer": optimizer, "capacity_bytes": capacity,
                              "usable_bytes": usable, "points": [], "max_batch": {}}
    t_start = time.perf_counter()
    for variant in ("no_gc", "gc"):
        pred_max = M.max_batch(spec, usable, seq_len, dtype, optimizer, variant == "gc", kind) if usable else None
        pred_max_no_margin = (M.max_batch(spec, capacity - (M.DEVICE_CONTEXT_BYTES if kind != "cpu" else 0),
                                          seq_len, dtype, optimizer, variant == "gc", kind) if capacity else None)
        plan = sorted(set(asked[variant]) | ({pred_max, pred_max + 1} - {0} if pred_max is not None else set()))
        model, api = build(spec, dtype, backend, variant == "gc")
        result.setdefault("gc_api", api)
        tried: dict[int, bool] = {}

        def trial(b: int) -> bool:
            census = variant == "no_gc" and b == 1 and hasattr(model, "model")
            with _tracking(backend, model):
                p = measure_point(model, backend, spec, variant, b, seq_len, optimizer, census=census,
                                  history=(variant, b) in history_points)
            pr = predicted(spec, variant, b, seq_len, dtype, optimizer, kind)
            p["predicted"] = pr
            p["error"] = compare(p, pr)
            if census and "census" in p:
                per_layer = M.layer_activation_bytes_per_token(spec, dtype) * b * seq_len
                p["census"]["formula_layer_bytes"] = per_layer
            result["points"].append(p)
            _print_point(p)
            tried[b] = p["fits"]
            (out / "memory_model_gpu.json").write_text(json.dumps(result, indent=1, default=str))
            return p["fits"]

        first_oom = None
        for b in plan:
            if first_oom is not None and b > first_oom:
                break
            if not trial(b):
                first_oom = b
        fits = [b for b, ok in tried.items() if ok]
        last_fit = max(fits) if fits else 0
        if first_oom is None:  # everything fitted: climb until an OOM (bounded)
            b = last_fit + 1
            while b <= last_fit + max_extra and trial(b):
                last_fit, b = b, b + 1
            first_oom = b if tried.get(b) is False else None
        if first_oom is not None and first_oom - last_fit > 1:  # bisect a gap below the first OOM
            lo, hi = last_fit, first_oom
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if trial(mid):
                    lo = mid
                else:
                    hi = mid
        best, exact = measured_max_batch(result["points"], variant)
        result["max_batch"][variant] = {"predicted": pred_max, "predicted_without_margin": pred_max_no_margin,
                                        "measured": best, "measured_exact": exact}
        del model
        _free(backend)
    result["wall_s"] = time.perf_counter() - t_start
    (out / "memory_model_gpu.json").write_text(json.dumps(result, indent=1, default=str))
    _print_summary(result)
    return result


def _g(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:8.2f}"


def _p(x: float | None) -> str:
    return "-" if x is None else f"{x:+6.2f}%"


def _print_point(p: dict[str, Any]) -> None:
    pr = p["predicted"]
    if not p["fits"]:
        print(f"{p['variant']:5s} b={p['batch_size']:<3d} OOM in {p.get('oom_phase')}; predicted peak "
              f"{_g(pr['peak_bytes'])} GiB ({pr['where']})", flush=True)
        return
    e = p["error"]
    res = p.get("peak_reserved_bytes")
    print(f"{p['variant']:5s} b={p['batch_size']:<3d} peak meas {_g(p['peak_allocated_bytes'])} pred "
          f"{_g(pr['peak_bytes'])} GiB {_p(e['peak_pct'])} | fwd+bwd {_p(e['fwd_bwd_pct'])} opt "
          f"{_p(e['optimizer_pct'])} after-fwd {_p(e['after_forward_pct'])} base {_p(e['baseline_pct'])} | "
          f"reserved {_g(res)} | {pr['where']} | {p['step_ms']:.0f} ms", flush=True)
    if "census" in p:
        c = p["census"]
        layers = [v for k, v in c.items() if k.startswith("layer") and k[5:].isdigit()]
        if layers:
            print(f"      census: layer saved {layers[0] / 2**20:.2f} MiB (formula "
                  f"{c['formula_layer_bytes'] / 2**20:.2f}), all layers equal: {len(set(layers)) == 1}, "
                  f"head+loss {c.get('head+loss', 0) / 2**20:.1f} MiB", flush=True)


def _print_summary(r: dict[str, Any]) -> None:
    print(f"\n{r['model']} ({r['n_layers']} layers) {r['dtype']} seq {r['seq_len']} {r['optimizer']} on "
          f"{r['environment']['device']}: capacity {_g(r['capacity_bytes'])} GiB, usable {_g(r['usable_bytes'])} GiB")
    errs = [abs(p["error"]["peak_pct"]) for p in r["points"] if p["fits"] and p["error"].get("peak_pct") is not None]
    if errs:
        print(f"peak error: max |pred - meas| = {max(errs):.2f}% over {len(errs)} points")
    for v, mb in r["max_batch"].items():
        verdict = "exact" if mb["measured_exact"] and mb["measured"] == mb["predicted"] else "DIFFERS"
        print(f"largest batch {v:5s}: predicted {mb['predicted']} (no margin: {mb['predicted_without_margin']}), "
              f"measured {mb['measured']}{'' if mb['measured_exact'] else ' (next batch not tried)'}: {verdict}")
    print(f"wall {r['wall_s']:.0f} s")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="directory for memory_model_gpu.json")
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-gc-batches", type=_ints, default=[1, 2])
    ap.add_argument("--gc-batches", type=_ints, default=[1, 2, 4, 8])
    ap.add_argument("--history", default="no_gc:1,gc:1,gc:8",
                    help="points whose allocator history is summarised (variant:batch,...; '' for none)")
    ap.add_argument("--memory-limit", help="cap the allocator (e.g. 30MB on the CPU smoke test)")
    a = ap.parse_args(argv)
    hist = {(v, int(b)) for v, b in (x.split(":") for x in a.history.split(",") if x)}
    limit = None
    if a.memory_limit:
        from gcdoctor.model.plan import parse_memory
        limit = parse_memory(a.memory_limit)
    run(a.out, a.model, a.seq_len, a.dtype, a.optimizer, a.device, a.no_gc_batches, a.gc_batches, hist,
        limit, a.layers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
