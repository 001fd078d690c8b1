"""Recomputation found without labels, in traces of the checkpointing people actually run.

gcdoctor's own captures label each recomputed region (`gcdoctor/recompute/<n>`, capture.py). A
user's trace has no labels: transformers' gradient checkpointing, `torch.utils.checkpoint`
(reentrant or not), DeepSpeed's `checkpointing.checkpoint` and FSDP's `checkpoint_wrapper` all
recompute inside the backward pass. What every such trace holds:

- autograd runs backward as one `autograd::engine::evaluate_function: <Node>` range per graph
  node (on the thread that runs backward: autograd's device thread on a GPU, the caller's on
  the CPU);
- an op that records a graph node carries its autograd `Sequence number` in the trace. Outside
  `create_graph=True`, backward formulas run with grad recording off, so their ops carry none;
- a recomputed forward runs with grad enabled *inside* a backward node: inside
  `CheckpointFunctionBackward` for the reentrant form (torch's and DeepSpeed's
  `CheckpointFunction`), inside the node whose saved tensor was first unpacked for the
  non-reentrant form (the unpack hook of `torch.utils.checkpoint`, which transformers, FSDP's
  `checkpoint_wrapper` and `torch.distributed`'s composable `checkpoint` all use).

So: ops with a sequence number, not themselves autograd node ranges, nested inside a backward
node on the same thread, are recomputation. One region per hosting node: its host interval runs
from the first recomputed op's start to the last one's end, and the device part follows by
correlation like any labelled window (windows.py). Traces whose cpu_ops carry no sequence numbers
(written by other tools, or stripped) fall back to forward-only op names (`aten::linear`, SDPA,
norms, activations) inside backward nodes, which bounds each region by its first and last such
op: an approximation, said so in `method`.

Not found here: recomputation compiled into one graph (torch.compile's min-cut rematerialisation,
selective checkpointing under compile), which leaves no separate forward ops in backward.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gcdoctor.trace.tables import CpuOps, TraceTables

NODE_PREFIX = "autograd::engine::evaluate_function: "
# the reentrant form's autograd.Function: torch.utils.checkpoint.CheckpointFunction and
# deepspeed.runtime.activation_checkpointing.checkpointing.CheckpointFunction
REENTRANT_NODE = "CheckpointFunctionBackward"
METHOD_SEQUENCE = "autograd_sequence"  # ops with an autograd sequence number inside backward nodes
METHOD_NAMES = "forward_op_names"  # forward-only op names inside backward nodes (no sequence numbers)
# Ops a decoder's forward calls and no backward formula does (their backward is a separate op:
# silu_backward, native_layer_norm_backward, _scaled_dot_product_*_attention_backward, ...).
FORWARD_ONLY_OPS = frozenset({
    "aten::linear", "aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward", "aten::_efficient_attention_forward", "aten::layer_norm",
    "aten::native_layer_norm", "aten::rms_norm", "aten::_fused_rms_norm", "aten::group_norm", "aten::silu",
    "aten::gelu", "aten::dropout", "aten::softmax", "aten::embedding", "aten::conv1d", "aten::conv2d",
})
# A double backward (create_graph=True, a gradient penalty) records graph nodes inside backward
# nodes too: its backward formulas' ops, among them `*_backward` ops that no forward calls. In a
# trace that shows one, only nodes that replay a forward-only op count as recomputation.
BACKWARD_OP = "backward"


@dataclass
class RecomputeFound:
    """The recomputed regions of a trace and how they were found."""

    host0: np.ndarray  # one host interval per region [host0, host1), sorted by start, ns
    host1: np.ndarray
    method: str  # METHOD_SEQUENCE | METHOD_NAMES
    kind: str  # reentrant | non-reentrant | mixed
    op_count: int  # recomputed ops (nested ones included)
    host_nodes: dict[str, int] = field(default_factory=dict)  # backward node that ran it -> regions
    notes: list[str] = field(default_factory=list)

    @property
    def regions(self) -> int:
        return len(self.host0)

    @property
    def host_ns(self) -> int:
        return int((self.host1 - self.host0).sum())

    def describe(self) -> str:
        """One line for notes and reports: what was found and from what."""
        how = ("forward ops recorded with grad enabled inside backward nodes" if self.method == METHOD_SEQUENCE
               else "forward-only op names inside backward nodes (the trace has no autograd sequence numbers; "
                    "each region is bounded by its first and last such op)")
        nodes = ", ".join(f"{n} x{c}" for n, c in sorted(self.host_nodes.items(), key=lambda kv: -kv[1])[:3])
        return f"{self.regions} recomputed regions ({self.kind} checkpointing), found from {how}; inside {nodes}"


def find_recompute(t: TraceTables) -> RecomputeFound | None:
    """The recomputed regions of an unlabelled checkpointing trace, or None when none are found."""
    c = t.cpu_ops
    if not len(c):
        return None
    names = np.asarray(t.names, dtype=object)
    ids_node = np.array([i for i, n in enumerate(t.names) if n.startswith(NODE_PREFIX)], dtype=np.int64)
    if not len(ids_node):
        return None
    is_node = np.isin(c.name_id, ids_node)
    method, cand = _candidates(t, names[ids_node], is_node)
    if not cand.any():
        return None
    found = _hosted_ops(c, is_node, cand)
    if found is None:
        return None
    hosts, ops = found
    notes: list[str] = []
    if method == METHOD_SEQUENCE:
        hosts, ops = _without_double_backward(t, hosts, ops, notes)
        if not len(ops):
            return None
    if method == METHOD_NAMES:
        notes.append("the trace's cpu ops carry no autograd sequence numbers: regions found from op names, "
                     "approximately")
    return _regions(c, names[c.name_id], hosts, ops, method, notes)


def _candidates(t: TraceTables, node_names: np.ndarray, is_node: np.ndarray) -> tuple[str, np.ndarray]:
    """(method, which cpu ops may be recomputed): those with an autograd sequence number, else
    forward-only op names."""
    c = t.cpu_ops
    # the node's own apply range ("MmBackward0" inside "...evaluate_function: MmBackward0") has one too
    applied = {n[len(NODE_PREFIX):] for n in node_names}
    ids_apply = np.array([i for i, n in enumerate(t.names) if n in applied], dtype=np.int64)
    seq = c.seq if len(c.seq) == len(c) else np.full(len(c), -1, dtype=np.int64)
    # autograd's own ranges carry sequence numbers too; any other op that does is a forward op
    has_seq = (seq >= 0) & ~is_node & ~np.isin(c.name_id, ids_apply)
    if has_seq.any():
        return METHOD_SEQUENCE, has_seq
    ids_fwd = np.array([i for i, n in enumerate(t.names) if n in FORWARD_ONLY_OPS], dtype=np.int64)
    return METHOD_NAMES, np.isin(c.name_id, ids_fwd)


def _hosted_ops(c: CpuOps, is_node: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(row of the innermost backward node hosting it, row) of each candidate op inside a backward
    node on its own thread; None when no candidate is."""
    starts, ends = c.start_ns, c.start_ns + c.dur_ns
    host_rows: list[np.ndarray] = []  # per recomputed op: row of its innermost backward node
    op_rows: list[np.ndarray] = []
    for tid in np.unique(c.tid[cand]).tolist():
        on_thread = c.tid == tid
        nrow = np.flatnonzero(is_node & on_thread)
        if not len(nrow):
            continue
        orow = np.flatnonzero(cand & on_thread)
        host = _innermost(starts[nrow], ends[nrow], starts[orow], ends[orow])
        inside = host >= 0
        host_rows.append(nrow[host[inside]])
        op_rows.append(orow[inside])
    if not host_rows or not sum(len(h) for h in host_rows):
        return None
    return np.concatenate(host_rows), np.concatenate(op_rows)


def _without_double_backward(t: TraceTables, hosts: np.ndarray, ops: np.ndarray,
                             notes: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """In a trace with a double backward, only the nodes that replay a forward-only op (noted)."""
    name_id = t.cpu_ops.name_id[ops]
    ids_bwd = [i for i, n in enumerate(t.names) if BACKWARD_OP in n.lower() and not n.startswith(NODE_PREFIX)]
    if not np.isin(name_id, ids_bwd).any():
        return hosts, ops
    ids_fwd = [i for i, n in enumerate(t.names) if n in FORWARD_ONLY_OPS]
    replaying = np.unique(hosts[np.isin(name_id, ids_fwd)])
    keep = np.isin(hosts, replaying)
    notes.append(f"a double backward (create_graph=True) records graph nodes in backward too: "
                 f"{len(np.unique(hosts[~keep]))} backward nodes without a forward-only op left out")
    return hosts[keep], ops[keep]


def _regions(c: CpuOps, op_names: np.ndarray, hosts: np.ndarray, ops: np.ndarray, method: str,
             notes: list[str]) -> RecomputeFound:
    """One region per hosting node, from its first recomputed op's start to its last one's end."""
    starts, ends = c.start_ns, c.start_ns + c.dur_ns
    uniq, inv = np.unique(hosts, return_inverse=True)
    h0 = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
    h1 = np.zeros(len(uniq), dtype=np.int64)
    np.minimum.at(h0, inv, starts[ops])
    np.maximum.at(h1, inv, ends[ops])
    order = np.argsort(h0, kind="stable")
    host_nodes: dict[str, int] = {}
    for r in uniq.tolist():
        n = str(op_names[r])[len(NODE_PREFIX):]
        host_nodes[n] = host_nodes.get(n, 0) + 1
    reentrant = sum(v for k, v in host_nodes.items() if REENTRANT_NODE in k)
    kind = "reentrant" if reentrant == len(uniq) else "non-reentrant" if reentrant == 0 else "mixed"
    return RecomputeFound(h0[order], h1[order], method, kind, len(ops), host_nodes, notes)


def _innermost(n0: np.ndarray, n1: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Index of the innermost interval [n0, n1) holding each [s, e), or -1. The intervals are one
    thread's backward node ranges, sorted by start and properly nested (a call tree)."""
    parent = np.full(len(n0), -1, dtype=np.int64)
    stack: list[int] = []
    for i in range(len(n0)):  # nodes are few (one per graph node and step); ops are many
        while stack and n1[stack[-1]] < n1[i]:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    j = np.searchsorted(n0, s, side="right") - 1  # the latest node starting at or before the op
    while True:
        bad = (j >= 0) & (n1[np.maximum(j, 0)] < e)
        if not bad.any():
            return j
        j[bad] = parent[j[bad]]


def recompute_host_intervals(t: TraceTables) -> tuple[np.ndarray, np.ndarray] | None:
    """Host intervals of the recomputation found without labels (the hook windows.py calls when a
    trace has no `gcdoctor/recompute` ranges), or None."""
    found = find_recompute(t)
    return None if found is None else (found.host0, found.host1)
