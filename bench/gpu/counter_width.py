"""Are NVML's PCIe byte counters (fields 197/198) really 32-bit? Read them raw at 20 Hz during
pinned host-to-device copies and print the value type, the largest raw value and how often a
raw value went down (a wrap). Usage on a CUDA machine: python bench/gpu/counter_width.py
"""
import json
import threading
import time

import pynvml as N
import torch

N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
nbytes = 1 << 30
host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
rows = []
stop = threading.Event()


def poll():
    while not stop.is_set():
        fv = N.nvmlDeviceGetFieldValues(h, [197, 198])
        rows.append((time.monotonic(), fv[1].valueType, fv[1].value.ullVal, fv[1].timestamp, fv[0].value.ullVal))
        stop.wait(0.05)


th = threading.Thread(target=poll)
th.start()
time.sleep(0.2)
t0 = time.monotonic()
n = 0
while time.monotonic() - t0 < 3.0:
    dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    n += 1
t1 = time.monotonic()
time.sleep(0.2)
stop.set()
th.join()
raw = [r[2] for r in rows]
drops = sum(1 for a, b in zip(raw, raw[1:]) if b < a)
total = sum((b - a) % 2**32 for a, b in zip(raw, raw[1:]))
print(json.dumps({"value_type_rx": rows[0][1], "samples": len(rows), "max_raw_rx": max(raw), "min_raw_rx": min(raw),
                  "over_2^32": sum(1 for v in raw if v >= 2**32), "decreases": drops,
                  "copied_GB": n * nbytes / 1e9, "torch_GBs": round(n * nbytes / (t1 - t0) / 1e9, 2),
                  "unwrapped_rx_GB": round(total / 1e9, 3),
                  "first_rows": [list(r) for r in rows[:3]]}))
