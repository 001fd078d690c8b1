"""Device backends: choose one by availability or by --device."""
from __future__ import annotations

from typing import Any

from gcdoctor.errors import UserError


def torch_musa_module() -> Any:
    """`torch.musa`, which `import torch_musa` sets (PyTorch's own type stubs do not have it)."""
    import torch
    return getattr(torch, "musa")  # noqa: B009 - an attribute torch_musa adds at run time


def musa_available() -> bool:
    try:
        import torch_musa  # noqa: F401
        return bool(torch_musa_module().is_available())
    except Exception:  # noqa: BLE001 - not installed or broken install: not available
        return False


def detect_kind() -> str:
    import torch
    if torch.cuda.is_available():
        return "cuda"
    if musa_available():
        return "musa"
    return "cpu"


def get_backend(spec: str | None = None):
    """`spec` is None/'auto', 'cpu', 'cuda', 'cuda:1', 'musa', 'musa:0'."""
    import torch
    kind, _, idx = (spec or "auto").partition(":")
    kind = kind.lower()
    if kind == "auto":
        kind = detect_kind()
    try:
        index = int(idx) if idx else 0
    except ValueError:
        raise UserError(f"--device {spec!r}: expected cpu, cuda, cuda:N, musa or musa:N") from None
    if kind == "cpu":
        from gcdoctor.backends.cpu import CpuBackend
        return CpuBackend()
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False)")
        if index >= torch.cuda.device_count():
            raise UserError(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s)")
        from gcdoctor.backends.cuda import CudaBackend
        return CudaBackend(index)
    if kind == "musa":
        if not musa_available():
            raise UserError("--device musa: torch_musa is not installed or sees no MUSA device")
        from gcdoctor.backends.musa import MusaBackend
        return MusaBackend(index)
    raise UserError(f"--device {spec!r}: expected cpu, cuda, cuda:N, musa or musa:N")
