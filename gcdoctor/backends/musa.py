"""Moore Threads MUSA backend (torch_musa). Checked call by call against torch_musa's source
(docs/musa.md, "Checked against torch_musa's source"); never run on a MUSA card.

`import torch_musa` renames PyTorch's PrivateUse1 backend to "musa", sets `torch.musa` to the
torch_musa module (a mirror of torch.cuda: synchronize, memory_allocated, max_memory_allocated,
memory_reserved, max_memory_reserved, reset_peak_memory_stats, empty_cache, mem_get_info,
set_per_process_memory_fraction, get_device_properties, Event, MUSAGraph) and
`ProfilerActivity.MUSA` to `ProfilerActivity.PrivateUse1`. Its caching allocator raises
torch.OutOfMemoryError "MUSA out of memory. Tried to allocate ..." in PyTorch's >= 2.2 layout and
reads PYTORCH_MUSA_ALLOC_CONF (expandable_segments:True needs MUSA 4.0 or later).
"""
from __future__ import annotations

from typing import Any

import torch

from gcdoctor.backends import torch_musa_module
from gcdoctor.backends.accelerator import AcceleratorBackend
from gcdoctor.facts import Environment


class MusaBackend(AcceleratorBackend):
    kind = "musa"
    supports_graphs = True  # torch.musa.MUSAGraph / torch.musa.graph; the launch probe checks they exist

    def __init__(self, index: int = 0) -> None:
        import torch_musa  # noqa: F401 - registers torch.musa
        super().__init__(torch_musa_module(), index)

    def reset_peak(self) -> None:
        # reset_peak_memory_stats is in torch_musa's memory module since it mirrors torch.cuda's;
        # older releases exported only reset_peak_stats
        reset = getattr(self.mod, "reset_peak_memory_stats", None) or self.mod.reset_peak_stats
        reset(self.index)

    def profiler_activities(self) -> list[Any]:
        # torch_musa sets ProfilerActivity.MUSA = PrivateUse1: the same activity under either name
        return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]

    def describe(self) -> Environment:
        env = super().describe()
        env.device_count = torch_musa_module().device_count()
        try:
            import torch_musa
            env.torch_musa = getattr(torch_musa, "__version__", None)
            env.runtime = f"MUSA {getattr(torch.version, 'musa', None) or '?'}"
        except Exception:  # noqa: BLE001
            pass
        env.driver = musa_driver_version()
        return env


def musa_driver_version() -> str | None:
    """The driver version `mthreads-gmi` prints in its table's header, or None without the tool."""
    import shutil
    import subprocess

    from gcdoctor.telemetry.mthreads import parse_gmi_table
    exe = shutil.which("mthreads-gmi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe], capture_output=True, text=True, timeout=10).stdout
        return parse_gmi_table(out).driver
    except Exception:  # noqa: BLE001 - a broken tool: the driver is unknown
        return None
