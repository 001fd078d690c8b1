"""The sweep's peak, tensor by tensor: a CUDA memory snapshot read and attributed (no torch).

`torch.cuda.memory._record_memory_history()` records every allocation and free of the caching
allocator with the Python frames that made it; `_dump_snapshot(path)` writes them as a pickle that
pytorch.org/memory_viz opens. gcdoctor records one training step at the sweep's peak point
(`diagnose --memory-snapshot`), replays the trace to the moment the allocated bytes peak, and
attributes each live block at that moment:

- parameters, gradients and optimizer states: by address (the step's own tensors, known to the
  probe: `known` maps a block address to its kind);
- logits and loss: of the logits' or the fp32 loss block's size, or allocated in the loss
  (frames naming `cross_entropy`, `log_softmax`, `nll_loss`, or transformers' loss module);
- optimizer temporaries: allocated inside `torch/optim/`;
- saved activations: allocated in a module's forward (transformers' modeling files, or a
  checkpoint's recompute) and still alive at the peak;
- temporaries: everything else (the backward's own grads of activations, kernel workspaces).
"""
from __future__ import annotations

from typing import Any

from gcdoctor.facts.sweep import LiveTensor, SnapshotFacts

KINDS = ("parameters", "gradients", "optimizer states", "optimizer temporaries", "logits and loss",
         "saved activations", "temporaries")
_LOSS = ("cross_entropy", "log_softmax", "nll_loss", "loss_utils", "ForCausalLMLoss")
_MODEL = ("/transformers/models/", "modeling_", "torch/utils/checkpoint.py")


def _frame_text(frames: list[dict[str, Any]]) -> str:
    for f in frames or []:
        name = str(f.get("filename", ""))
        if "gcdoctor/snapshot" in name:
            continue
        return f"{name.rsplit('/', 1)[-1]}:{f.get('line', '?')} {f.get('name', '')}".strip()
    return ""


def classify(frames: list[dict[str, Any]]) -> str:
    """The kind of a block from the frames that allocated it, innermost first: the first frame
    that is the optimizer's, the loss's or the model's decides (outer frames, such as gcdoctor's
    step calling the model, do not)."""
    for f in frames or []:
        name, func = str(f.get("filename", "")), str(f.get("name", ""))
        if "torch/optim/" in name:
            return "optimizer temporaries"
        if any(k in name or k in func for k in _LOSS):
            return "logits and loss"
        if any(k in name for k in _MODEL):
            return "saved activations"
    return "temporaries"


def _preexisting(snapshot: dict[str, Any], trace: list[dict[str, Any]]) -> dict[Any, int]:
    """Blocks alive when the recording started: still allocated at the dump and never allocated
    in the trace, or freed in the trace without having been allocated in it. Keyed by address as
    the snapshot writes it (not checked)."""
    seen: set[Any] = set()
    before: dict[Any, int] = {}
    for ev in trace:
        action, addr = ev.get("action"), ev.get("addr")
        if action == "alloc":
            seen.add(addr)
        elif action == "free_requested" and addr not in seen:
            before[addr] = int(ev.get("size") or 0)
    for seg in snapshot.get("segments") or []:
        addr = int(seg.get("address", 0))
        for blk in seg.get("blocks") or []:
            if blk.get("state") == "active_allocated" and addr not in seen:
                before.setdefault(addr, int(blk.get("requested_size") or blk.get("size") or 0))
            addr += int(blk.get("size") or 0)
    return before


def attribute(snapshot: dict[str, Any], known: dict[int, str], device: int = 0, top: int = 10,
              loss_sizes: set[int] | frozenset[int] = frozenset()) -> SnapshotFacts:
    """Replay `snapshot`'s trace of `device` to its allocated peak and attribute what is alive.

    `known`: address -> kind of tensors the caller knows (parameters, gradients, optimizer
    states). `loss_sizes`: byte sizes that are the logits and the fp32 loss block (e x V x T and
    4 x V x T: the LM head's output is made inside the model's forward, where no frame tells it
    from an activation). Blocks alive before the recording count from the start (their sizes from
    the snapshot's segments)."""
    traces = snapshot.get("device_traces") or []
    trace = traces[device] if device < len(traces) else []
    before = _preexisting(snapshot, trace)

    def replay(stop: int | None = None):
        live: dict[Any, tuple[int, list[Any] | None]] = {a: (n, None) for a, n in before.items()}
        total = sum(before.values())
        peak, peak_at = total, -1
        for i, ev in enumerate(trace if stop is None else trace[:stop + 1]):
            action, addr, size = ev.get("action"), ev.get("addr"), int(ev.get("size") or 0)
            if action == "alloc":
                live[addr] = (size, ev.get("frames") or [])
                total += size
                if total > peak:
                    peak, peak_at = total, i
            elif action == "free_requested" and addr in live:
                total -= live.pop(addr)[0]
        return live, peak, peak_at

    _, peak, peak_at = replay()
    live, _, _ = replay(peak_at)
    out = SnapshotFacts(peak_bytes=peak, peak_index=peak_at, entries=len(trace))
    items: list[LiveTensor] = []
    for addr, (n, frames) in live.items():
        if frames is None:
            items.append(LiveTensor(n, known.get(addr, "temporaries"), "alive before the recorded step"))
        else:
            kind = known.get(addr) or ("logits and loss" if n in loss_sizes else classify(frames))
            items.append(LiveTensor(n, kind, _frame_text(frames)))
    for t in items:
        out.by_kind_bytes[t.kind] = out.by_kind_bytes.get(t.kind, 0) + t.bytes
    out.largest = sorted(items, key=lambda t: -t.bytes)[:top]
    if not trace:
        out.notes.append("the snapshot has no trace of allocations")
    out.notes.append("sizes are the requested bytes; the allocator's blocks round them up to 512 B")
    return out
