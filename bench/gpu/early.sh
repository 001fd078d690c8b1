#!/usr/bin/env bash
# First call: validate capture on CUDA, record a small H200 trace, probe NVML counters and the
# DeepSpeed CPU Adam build time. Writes into $OUT.
source bench/gpu/setup.sh
cd /tmp && python3 - <<'PY' > $OUT/nvml.txt 2>&1 &
import pynvml, time
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
print("driver", pynvml.nvmlSystemGetDriverVersion())
for fid, name in ((197, "PCIE_COUNT_TX_BYTES"), (198, "PCIE_COUNT_RX_BYTES"), (186, "POWER_INSTANT")):
    try:
        v = pynvml.nvmlDeviceGetFieldValues(h, [fid])[0]
        print(name, "ret", v.nvmlReturn, "type", v.valueType, "value", v.value.ullVal, v.value.uiVal, v.value.dVal)
    except Exception as e:
        print(name, "error", repr(e))
t = time.perf_counter(); pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES); print("pcie tput call ms", 1e3*(time.perf_counter()-t))
print("link", pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h), pynvml.nvmlDeviceGetCurrPcieLinkWidth(h), pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h), pynvml.nvmlDeviceGetMaxPcieLinkWidth(h))
try: print("clock event reasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
except Exception as e: print("clock reasons err", e)
PY
cd - >/dev/null
(time python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load()") > $OUT/cpuadam.txt 2>&1 &
python3 -m gcdoctor diagnose --no-tui --device cuda --model llama3-8b --layers 2 --probes sweep \
   --batch-sizes 1,2 --out /tmp/early 2>&1 | grep -v USDT | tail -30
wait
python3 bench/telemetry_cost.py --pcie-demo --out /tmp/early/pcie 2>&1 | tail -25
python3 bench/telemetry_cost.py --seconds 10 --rates 20 --blocks 6 --steps 30 --out /tmp/early/cost 2>&1 | tail -15
ls -la /tmp/early /tmp/early/traces
tar czf $OUT/early.tgz -C /tmp early
