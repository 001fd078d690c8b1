"""Where does the 20 Hz sampler's CPU go on a real GPU? Thread CPU % of one core over 8 s for:
A: a bare 20 Hz loop doing only the tick's field-values call (power + PCIe byte counters);
B: the NVML source alone in the sampler; C: NVML + psutil (the default).
"""
import threading
import time

from gcdoctor.telemetry import TelemetrySampler, open_sources
from gcdoctor.telemetry.nvml import NvmlSource


def thread_cpu(fn, seconds=8.0):
    out = {}

    def run():
        c0 = time.thread_time()
        fn(seconds)
        out["cpu"] = time.thread_time() - c0

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return 100.0 * out["cpu"] / seconds


def bare(seconds):
    src = [s for s in open_sources("cuda", 0, include_host=False) if isinstance(s, NvmlSource)][0]
    src.set_rate_hz(20.0)
    src.reset()
    d = src.devices[0]
    assert d.tick is not None, "no tick reader at 20 Hz"
    stop = time.monotonic() + seconds
    nxt = time.monotonic()
    ev = threading.Event()
    while time.monotonic() < stop:
        d.tick.read()
        nxt += 0.05
        ev.wait(max(0.0, nxt - time.monotonic()))


def sampler(include_host):
    def fn(seconds):
        s = TelemetrySampler(open_sources("cuda", 0, include_host=include_host), rate_hz=20.0)
        s.start()
        time.sleep(seconds)
        s.stop()
        fn.cpu = s.thread_cpu_s
    return fn


print(f"A bare field-values loop at 20 Hz: {thread_cpu(bare):.2f}% of one core")
for name, host in (("B sampler, NVML only", False), ("C sampler, NVML + psutil", True)):
    f = sampler(host)
    thread_cpu(f)
    print(f"{name}: {100.0 * f.cpu / 8.0:.2f}% of one core (sampler thread)")
