"""PCIe link arithmetic for telemetry: the peak data rate of a link from its generation and width.

The per-lane rates live in the one hardware table, `gcdoctor.model.hardware.PCIE_GBS_PER_LANE`
(per direction, GB/s of 1e9 bytes, after line encoding: 8b/10b for Gen1-2, 128b/130b for
Gen3-5, FLIT for Gen6; PCI-SIG base specifications as tabulated in Wikipedia, "PCI Express":
Gen3 0.985, Gen4 1.969, Gen5 3.938 GB/s per lane). Real copies reach about 80-90% of these:
TLP headers and flow control are not in the encoding figure.
"""
from __future__ import annotations

from gcdoctor.model.hardware import PCIE_GBS_PER_LANE

# Used to decide whether a wrapping byte counter can be unwrapped when the link is unknown:
# assume the fastest link in the table at x16, so an ambiguous delta is never trusted.
FASTEST_KNOWN_LINK_GBS = PCIE_GBS_PER_LANE[max(PCIE_GBS_PER_LANE)] * 16


def link_peak_gbs(generation: int | None, width: int | None) -> float | None:
    """Peak per-direction data rate of a link, or None if generation or width is unknown."""
    if not generation or not width or generation not in PCIE_GBS_PER_LANE:
        return None
    return round(PCIE_GBS_PER_LANE[generation] * width, 3)
