"""Writes tests/data/musa-trace.json: a hand-made torch.profiler trace shaped as torch_musa's
Kineto (MUPTI) writes one, with every interval chosen so the trace metrics have exact expected
values (tests/test_musa_trace.py). Its categories and names are torch_musa's (docs/musa.md,
checklist): host calls in `musa_runtime` named musaLaunchKernel / musaMemcpyAsync /
musaStreamSynchronize, device ops in `kernel` and `gpu_memcpy`, each joined to its call by
`correlation`; one muDNN kernel name as published from an MTT S4000 trace. What a real trace adds
(deviceProperties, flow events, more threads) is not needed by the metrics and left out.

Two profiler steps of 1000 us. In each (o = step start): launches at o+100, o+200, o+400
(6 us each) start kernels at o+110 (40 us), o+210 (4 us), o+410 (120 us); musaMemcpyAsync at
o+300 (8 us) a 1 MiB pageable HtoD copy at o+312 (20 us); musaStreamSynchronize at o+520 (20 us).
Per step: 3 kernels, 164 us of kernels, 184 us busy, 5 runtime calls, 20 us synchronising.
"""
import json
from pathlib import Path

T0 = 5_000_000.0
HOST, DEV, STREAM = 4242, 0, 7
GEMV = ("void musa::dnn::(anonymous namespace)::batch_gemv_row_continuous_kernel<float, "
        "(musa::dnn::AlignAttr)1, 128, 64, 1024, false, true, 128>(float*, float const*, float const*, "
        "float const*, float const*, int, int, int, int, long, int, long, int, long, int, long, float, "
        "float, float)")
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
events = [{"ph": "M", "name": "process_name", "pid": HOST, "tid": 0, "ts": 0.0, "args": {"name": "python3"}},
          {"ph": "M", "name": "process_name", "pid": DEV, "tid": 0, "ts": 0.0, "args": {"name": "MUSA 0"}}]


def x(cat, name, ts, dur, pid=HOST, tid=HOST, **args):
    events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": T0 + ts, "dur": dur,
                   "args": args})


for step in range(2):
    o, c = 1000 * step, 100 * step
    x("user_annotation", f"ProfilerStep#{step}", o, 1000)
    x("cpu_op", "aten::linear", o + 90, 20)
    x("musa_runtime", "musaLaunchKernel", o + 100, 6, correlation=c + 1)
    x("kernel", GEMV, o + 110, 40, pid=DEV, tid=STREAM, correlation=c + 1, stream=STREAM, device=DEV)
    x("cpu_op", "aten::add", o + 195, 15)
    x("musa_runtime", "musaLaunchKernel", o + 200, 6, correlation=c + 2)
    x("kernel", ADD, o + 210, 4, pid=DEV, tid=STREAM, correlation=c + 2, stream=STREAM, device=DEV)
    x("cpu_op", "aten::copy_", o + 290, 22)
    x("musa_runtime", "musaMemcpyAsync", o + 300, 8, correlation=c + 3)
    x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", o + 312, 20, pid=DEV, tid=STREAM, correlation=c + 3,
      stream=STREAM, device=DEV, bytes=1 << 20)
    x("cpu_op", "aten::linear", o + 390, 20)
    x("musa_runtime", "musaLaunchKernel", o + 400, 6, correlation=c + 4)
    x("kernel", GEMV, o + 410, 120, pid=DEV, tid=STREAM, correlation=c + 4, stream=STREAM, device=DEV)
    x("musa_runtime", "musaStreamSynchronize", o + 520, 20, correlation=c + 5)

out = Path(__file__).with_name("musa-trace.json")
out.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=0) + "\n")
