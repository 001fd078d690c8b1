"""Write a large synthetic torch.profiler-style GPU trace, for developing the trace loader only.

It mimics the Chrome-trace JSON that kineto writes (kernel, cuda_runtime, gpu_memcpy,
gpu_memset, cpu_op, user_annotation, gpu_user_annotation, ac2g flows, metadata), with the
gcdoctor labels, so load and analysis speed can be tried on a machine without a GPU. It is NOT
evidence: recorded benchmark numbers come from real device traces (docs/benchmarks.md).

    python bench/make_synthetic_trace.py /tmp/synthetic.json --steps 8 --layers 32
    python bench/make_synthetic_trace.py /tmp/synthetic.json --style compact   # torch <= 2.11 layout
"""
from __future__ import annotations

import argparse
import gzip
import random
from pathlib import Path


def _t(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


class Writer:
    """Emits events in one of two kineto layouts: 'lines' (one key per line, torch 2.13) or
    'compact' (several keys per line, as in output_json.cpp of earlier releases)."""

    def __init__(self, fh, style: str):
        self.fh, self.style, self.first = fh, style, True

    def event(self, fields: list[tuple[str, str]], args: str | None) -> None:
        out = [] if self.first else [","]
        self.first = False
        if self.style == "lines":
            body = ",\n".join(f'    "{k}": {v}' for k, v in fields)
            out.append("\n  {\n" + body)
            if args is not None:
                out.append('\n    ,\n    "args": {\n      ' + args + "\n    }")
            out.append("\n  }")
        else:
            head = ", ".join(f'"{k}": {v}' for k, v in fields[:5])
            tail = ", ".join(f'"{k}": {v}' for k, v in fields[5:])
            out.append("\n  {\n    " + head + (",\n    " + tail if tail else ""))
            if args is not None:
                out.append(',\n    "args": {\n      ' + args + "\n    }")
            out.append("\n  }")
        self.fh.write("".join(out))


KERNELS = {
    "gemm": "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
            "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)",
    "ew": "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, "
          "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
          "std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
          "c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)",
    "red": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
           "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
           "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >"
           "(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor"
           "<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
           "unsigned int, float, 4, 4>)",
    "attn": "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
            "false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, "
            "false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
    "adam": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
            "(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
            "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, "
            "double, double, double, double, bool, float*, float*>(...)",
}
OPS = [("aten::linear", "aten::mm", "gemm", 120_000), ("aten::mul", None, "ew", 9_000),
       ("aten::add", None, "ew", 7_000), ("aten::sum", None, "red", 15_000),
       ("aten::_scaled_dot_product_flash_attention", "aten::_flash_attention_forward", "attn", 180_000),
       ("aten::silu", None, "ew", 8_000), ("aten::linear", "aten::mm", "gemm", 90_000),
       ("aten::mul", None, "ew", 2_500), ("aten::pow", None, "ew", 3_000),
       ("aten::mean", None, "red", 4_000), ("aten::rsqrt", None, "ew", 2_000),
       ("aten::linear", "aten::mm", "gemm", 60_000)]


class Sim:
    def __init__(self, w: Writer, rng: random.Random, pid: int = 4242, main_tid: int = 4242,
                 bwd_tid: int = 4300):
        self.w, self.rng, self.pid = w, rng, pid
        self.main, self.bwd = main_tid, bwd_tid
        self.cpu = {main_tid: 1_000_000_000_000_000, bwd_tid: 1_000_000_000_000_000}
        self.gpu = {7: 0, 20: 0}
        self.ext = 0
        self.corr = 0

    def now(self, tid):
        return self.cpu[tid]

    def cpu_range(self, cat, name, tid, t0, t1):
        self.ext += 1
        self.w.event([("ph", '"X"'), ("cat", f'"{cat}"'), ("name", f'"{name}"'), ("pid", str(self.pid)),
                      ("tid", str(tid)), ("ts", _t(t0)), ("dur", _t(t1 - t0))],
                     f'"External id": {self.ext},"Record function id": 0, "Ev Idx": {self.ext - 1}')

    def gpu_range(self, name, stream, t0, t1):
        self.w.event([("ph", '"X"'), ("cat", '"gpu_user_annotation"'), ("name", f'"{name}"'),
                      ("pid", "0"), ("tid", str(stream)), ("ts", _t(t0)), ("dur", _t(t1 - t0))],
                     f'"External id": {self.ext}')

    def launch(self, tid, kind, dur_ns, stream=7, cat="kernel", name=None, nbytes=None,
               api="cudaLaunchKernel"):
        rng = self.rng
        self.corr += 1
        c = self.corr
        t0 = self.cpu[tid]
        rt = rng.randint(2_500, 9_000)
        start = max(self.gpu[stream] + rng.randint(800, 2_500), t0 + rt // 2 + rng.randint(1_000, 6_000))
        end = start + dur_ns
        self.gpu[stream] = end
        self.w.event([("ph", '"X"'), ("cat", '"cuda_runtime"'), ("name", f'"{api}"'), ("pid", str(self.pid)),
                      ("tid", str(tid)), ("ts", _t(t0)), ("dur", _t(rt))],
                     f'"External id": {self.ext}, "cbid": 211, "correlation": {c}')
        self.w.event([("ph", '"s"'), ("id", str(c)), ("pid", str(self.pid)), ("tid", str(tid)),
                      ("ts", _t(t0)), ("cat", '"ac2g"'), ("name", '"ac2g"')], None)
        if cat == "kernel":
            args = (f'"External id": {self.ext}, "queued": 0, "device": 0, "context": 1, "stream": {stream}, '
                    f'"correlation": {c}, "registers per thread": 128, "shared memory": 49152, '
                    f'"blocks per SM": 1.21, "warps per SM": 4.85, "grid": [132, 8, 1], '
                    f'"block": [128, 1, 1], "est. achieved occupancy %": 6')
            kname = KERNELS[kind]
        else:
            gbs = nbytes / dur_ns
            args = (f'"External id": {self.ext}, "device": 0, "context": 1, "stream": {stream}, '
                    f'"correlation": {c}, "bytes": {nbytes}, "memory bandwidth (GB/s)": {gbs:.6f}')
            kname = name
        self.w.event([("ph", '"X"'), ("cat", f'"{cat}"'), ("name", f'"{kname}"'), ("pid", "0"),
                      ("tid", str(stream)), ("ts", _t(start)), ("dur", _t(dur_ns))], args)
        self.w.event([("ph", '"f"'), ("id", str(c)), ("pid", "0"), ("tid", str(stream)), ("ts", _t(start)),
                      ("cat", '"ac2g"'), ("name", '"ac2g"'), ("bp", '"e"')], None)
        self.cpu[tid] = t0 + rt + rng.randint(500, 2_000)
        return start, end

    def op(self, tid, spec, scale=1.0):
        parent, child, kind, kdur = spec
        rng = self.rng
        t0 = self.cpu[tid]
        self.cpu[tid] += rng.randint(3_000, 8_000)
        if child:
            c0 = self.cpu[tid]
            self.cpu[tid] += rng.randint(2_000, 5_000)
            s, e = self.launch(tid, kind, int(kdur * scale * rng.uniform(0.8, 1.2)))
            self.cpu[tid] += rng.randint(1_000, 3_000)
            self.cpu_range("cpu_op", child, tid, c0, self.cpu[tid])
        else:
            s, e = self.launch(tid, kind, int(kdur * scale * rng.uniform(0.8, 1.2)))
        self.cpu[tid] += rng.randint(1_000, 4_000)
        self.cpu_range("cpu_op", parent, tid, t0, self.cpu[tid])
        return s, e

    def labelled(self, tid, name, specs, scale=1.0):
        t0 = self.cpu[tid]
        first = last = None
        for spec in specs:
            s, e = self.op(tid, spec, scale)
            first = s if first is None else first
            last = e
        self.cpu_range("user_annotation", name, tid, t0, self.cpu[tid])
        self.gpu_range(name, 7, first, last)

    def step(self, k, layers):
        m, b = self.main, self.bwd
        s0 = self.cpu[m]
        f0 = self.cpu[m]
        self.launch(m, None, 40_000, stream=7, cat="gpu_memcpy", name="Memcpy HtoD (Pageable -> Device)",
                    nbytes=65_536, api="cudaMemcpyAsync")
        for layer in range(layers):
            self.labelled(m, f"gcdoctor/forward/{layer}", OPS)
        self.cpu_range("user_annotation", "gcdoctor/forward", m, f0, self.cpu[m])
        b0 = self.cpu[b] = max(self.cpu[b], self.cpu[m])
        for layer in reversed(range(layers)):
            self.labelled(b, f"gcdoctor/recompute/{layer}", OPS[:-1])
            for spec in OPS + OPS:
                self.op(b, spec, 1.0)
        self.cpu[m] = self.cpu[b] + 5_000
        self.cpu_range("user_annotation", "gcdoctor/backward", m, b0 - 1_000, self.cpu[m])
        o0 = self.cpu[m]
        for _ in range(40):
            self.launch(m, "adam", 300_000)
        self.launch(m, None, 2_000, stream=7, cat="gpu_memset", name="Memset (Device)", nbytes=4,
                    api="cudaMemsetAsync")
        self.launch(m, None, 6_000, stream=7, cat="gpu_memcpy", name="Memcpy DtoH (Device -> Pinned)",
                    nbytes=4, api="cudaMemcpyAsync")
        self.cpu[m] = max(self.cpu[m], self.gpu[7]) + 10_000
        self.cpu_range("user_annotation", "gcdoctor/optimizer", m, o0, self.cpu[m])
        self.cpu_range("user_annotation", f"ProfilerStep#{k}", m, s0, self.cpu[m])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--style", choices=["lines", "compact"], default="lines")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    opener = gzip.open if a.out.suffix == ".gz" else open
    with opener(a.out, "wt") as fh:
        fh.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": 0, "name": '
                 '"Synthetic GPU", "totalGlobalMem": 150110011392,\n      "computeMajor": 9, '
                 '"computeMinor": 0\n    }\n  ],\n  "cupti_version": 26,\n  "cuda_runtime_version": 13000,\n'
                 '  "cuda_driver_version": 13000,\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": '
                 '1700000000000000000,\n  "traceEvents": [')
        w = Writer(fh, a.style)
        w.event([("ph", '"M"'), ("name", '"process_name"'), ("ts", "0.000"), ("pid", "0"), ("tid", "0")],
                 '"name": "python"')
        sim = Sim(w, random.Random(a.seed))
        for k in range(a.steps):
            sim.step(k + 1, a.layers)
        fh.write(',\n  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", "tid": "", '
                 f'"ts": {_t(sim.cpu[sim.main] + 1000)}\n  }}\n  ],\n  "traceName": "{a.out}"\n}}\n')
    print(f"wrote {a.out} ({a.out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
