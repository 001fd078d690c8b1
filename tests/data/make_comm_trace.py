"""Writes tests/data/comm-fsdp.json: a hand-made trace of one sharded step on one device, with every
interval chosen so the communication metrics have exact expected values (tests/test_distributed.py).

Host (pid 100): forward [0, 1000) and optimizer [3000, 3500) on the main thread 1, backward
[1000, 3000); the recompute [1500, 2000) on autograd's thread 2. Collectives: an all-gather in forward
(plus a coalesced all-gather wrapping another c10d call: one call), one in backward, one issued by the
recompute, a reduce-scatter in backward, and a `c10d::wait` that is no call.
Device (pid 0): compute on stream 7 [100, 900) forward, [1500, 2000) the recompute, [2000, 2900)
backward; NCCL on stream 20: all-gather [50, 150) (50 exposed), all-gather [1400, 1700) (100 exposed,
200 beside the recompute), reduce-scatter [2950, 3050) (all exposed).
"""
import json
from pathlib import Path

T0 = 1_000_000.0
events = [{"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "ts": 0.0, "args": {"name": "python"}}]


def x(cat, name, tid, ts, dur, pid=100, **args):
    events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": T0 + ts, "dur": dur,
                   "args": args})


x("user_annotation", "gcdoctor/forward", 1, 0, 1000)
x("user_annotation", "gcdoctor/backward", 1, 1000, 2000)
x("user_annotation", "gcdoctor/optimizer", 1, 3000, 500)
x("user_annotation", "gcdoctor/recompute/layer0", 2, 1500, 500)
x("cpu_op", "c10d::_allgather_base_", 1, 40, 5)
x("cpu_op", "c10d::allgather_into_tensor_coalesced_", 1, 200, 60)
x("cpu_op", "c10d::_allgather_base_", 1, 210, 40)  # nested in the coalesced call: the same call
x("cpu_op", "c10d::_allgather_base_", 2, 1390, 5)
x("cpu_op", "c10d::_allgather_base_", 2, 1600, 5)  # issued inside the recompute, on its thread
x("cpu_op", "c10d::_reduce_scatter_base_", 2, 2940, 5)
x("cpu_op", "c10d::wait", 1, 2950, 5)
kernels = [(7, "gemm_fwd", 100, 800, 1, 90), (7, "gemm_recompute", 1500, 500, 2, 1510),
           (7, "gemm_bwd", 2010, 890, 2, 2001), (20, "ncclDevKernel_AllGather_RING_LL", 50, 100, 1, 41),
           (20, "ncclDevKernel_AllGather_RING_LL", 1400, 300, 2, 1391),
           (20, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", 2950, 100, 2, 2941)]
for corr, (stream, name, ts, dur, tid, launch) in enumerate(kernels, start=1):
    x("cuda_runtime", "cudaLaunchKernel", tid, launch, 2, correlation=corr, cbid=211)
    x("kernel", name, stream, ts, dur, pid=0, stream=stream, correlation=corr, device=0)
trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150110011392}],
         "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, "cuda_runtime_version": 12080,
         "host_name": "handmade", "traceEvents": events}
Path(__file__).with_name("comm-fsdp.json").write_text(json.dumps(trace, indent=0))
