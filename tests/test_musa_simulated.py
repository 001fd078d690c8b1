"""`gcdoctor diagnose --device musa` end to end on a simulated MUSA device.

tests/fake_torch_musa stands in for torch_musa (its surface: docs/musa.md's checklist; its
allocator: the CPU backend's storage counter, raising torch_musa's OOM text at the device's
bytes). What the fake cannot give is a "musa" device for tensors, so the one override here puts
MusaBackend's tensors on the CPU and counts them; every torch.musa call of the backend, the OOM
search, the telemetry fallback and the report are gcdoctor's own path for MUSA.
"""
from __future__ import annotations

import contextlib
import shutil
import sys
from pathlib import Path

import pytest
import torch

from gcdoctor import cli
from gcdoctor.backends import get_backend, musa as musa_backend
from gcdoctor.backends.musa import MusaBackend
from gcdoctor.facts import Facts

FAKE_DIR = Path(__file__).resolve().parent / "fake_torch_musa"
MiB = 1 << 20
CONTEXT = 800 * MiB  # held outside the allocator: more than the memory model's 768 MiB default, so it is read
# one layer of tiny-llama, fp32, AdamW, seq 512, as this sweep measures it: 55 MiB at batch 1 (the
# optimizer step's peak); at batch 2, 63 MiB with checkpointing and, without it, a 16 MiB request in
# the backward beyond 72 MiB; so 72 MiB fit batch 1 without checkpointing and batch 2 with it
TOTAL = CONTEXT + 72 * MiB


@pytest.fixture
def fake_musa(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE_DIR))
    sys.modules.pop("torch_musa", None)
    import torch_musa as fake

    class SimulatedMusaBackend(MusaBackend):
        """MusaBackend with its tensors on the CPU, counted by the fake's allocator."""

        @property
        def device(self) -> torch.device:
            return torch.device("cpu")

        def tracking(self, *tensors_alive):
            fake.track(tensors_alive)

            @contextlib.contextmanager
            def counting():
                with fake.counting_mode():
                    yield
            return counting()

        def track(self, tensors) -> None:
            fake.track(tensors)

    def install(total_bytes: int, context_bytes: int = 512 * MiB):
        mod = fake.install(monkeypatch, total_bytes, context_bytes)
        monkeypatch.setattr(musa_backend, "MusaBackend", SimulatedMusaBackend)
        return mod
    yield install
    sys.modules.pop("torch_musa", None)


def test_backend_reads_torch_musa_counters(fake_musa) -> None:
    fake = fake_musa(576 * MiB)
    b = get_backend("musa")
    assert type(b).__mro__[1] is MusaBackend and b.kind == "musa"
    assert b.total_memory() == 576 * MiB and b.device_name() == "MTT S80"
    with b.tracking():
        x = torch.empty(4 * MiB, dtype=torch.uint8)
        assert b.memory_allocated() == 4 * MiB
        del x
        assert b.memory_allocated() == 0 and b.max_memory_allocated() == 4 * MiB
        b.reset_peak()
        assert b.max_memory_allocated() == 0
    assert b.mem_get_info() == (64 * MiB, 576 * MiB)  # 512 MiB held by the fake's context
    assert b.non_allocator_bytes() == 512 * MiB
    b.set_memory_limit(36 * MiB)  # set_per_process_memory_fraction(0.0625): a float, as torch_musa demands
    assert fake._alloc.allowed == 36 * MiB and b.memory_limit() == 36 * MiB
    assert b.profiler_activities()[1] == torch.profiler.ProfilerActivity.MUSA


def test_oom_in_torch_musa_words_is_read_and_classified(fake_musa) -> None:
    fake_musa(576 * MiB)
    b = get_backend("musa")
    b.set_memory_limit(36 * MiB)
    with b.tracking():
        keep = torch.empty(20 * MiB, dtype=torch.uint8)
        with pytest.raises(torch.OutOfMemoryError) as exc:
            torch.empty(20 * MiB, dtype=torch.uint8)
        assert str(exc.value).startswith("MUSA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                                         "capacity of 576.00 MiB of which 44.00 MiB is free. 36.00 MiB allowed; "
                                         "Of the allocated memory 20.00 MiB is allocated by PyTorch, and 0 bytes")
        assert b.is_oom(exc.value)
        info = b.oom_info(exc.value, phase="forward")
        del keep
    assert (info.spelling, info.request_bytes, info.allowed_bytes, info.kind) == (
        "caching allocator", 20 * MiB, 36 * MiB, "capacity")


@pytest.mark.slow
def test_diagnose_device_musa_end_to_end(fake_musa, tmp_path: Path, capsys) -> None:
    assert shutil.which("mthreads-gmi") is None  # the telemetry must fall back
    fake_musa(TOTAL, CONTEXT)
    out = tmp_path / "run"
    rc = cli.main(["diagnose", "--device", "musa", "--model", "tiny-llama", "--layers", "1",
                   "--dtype", "fp32", "--seq-len", "512", "--probes", "sweep", "--max-batch", "2", "--steps", "1",
                   "--warmup", "0", "--no-profile", "--no-tui", "--telemetry-hz", "2", "--out", str(out)])
    console = capsys.readouterr().out
    assert rc == 0, console
    facts = Facts.load(out / "facts.json")
    env = facts.environment
    assert (env.device_kind, env.device_name, env.total_memory_bytes) == ("musa", "MTT S80", TOTAL)
    assert env.torch_musa == "2.1.1+fake" and env.runtime == "MUSA 4030" and env.driver is None
    # the OOM search ended on torch_musa's own OOM, read as the caching allocator's
    sweep = facts.sweep
    ooms = [m for m in sweep.measurements if not m.fits]
    assert ooms and all(m.oom.spelling == "caching allocator" and m.oom.kind == "capacity" for m in ooms)
    assert all(m.oom.message.startswith("MUSA out of memory. Tried to allocate") for m in ooms)
    fits = [m for m in sweep.measurements if m.fits]
    assert fits and max(m.peak_allocated_bytes for m in fits) <= TOTAL - CONTEXT
    assert sweep.max_batch == {"no_gc": 1, "gc": 2}
    assert [(t.variant, t.batch_size, t.fits) for t in sweep.trials] == [
        ("no_gc", 1, True), ("no_gc", 2, False), ("gc", 1, True), ("gc", 2, True)]
    assert [(m.oom_phase, m.oom.request_bytes) for m in ooms] == [("backward", 16 * MiB)]
    # telemetry: no pymtml, no mthreads-gmi: each device series unavailable with both reasons
    why = facts.telemetry.unavailable["gpu0.util_pct"]
    assert why == "pymtml: mthreads-ml-py not installed (import pymtml failed); mthreads-gmi: mthreads-gmi not on PATH"
    assert facts.telemetry.sources == ["psutil"]
    report = (out / "report.md").read_text()
    assert "| device | MTT S80 (musa) |" in report and "| torch_musa | 2.1.1+fake |" in report
    assert "MTT S80" in console.splitlines()[0] + console.splitlines()[1]


def test_ranks_on_musa_join_over_mccl(fake_musa, monkeypatch) -> None:
    """torch_musa's collective backend is "mccl" (its README); each rank takes its LOCAL_RANK's card."""
    import torch.distributed as dist

    from gcdoctor.run.distributed import Group, Launch
    fake = fake_musa(576 * MiB)
    calls: dict = {}
    monkeypatch.setattr(fake, "set_device", lambda i: calls.setdefault("device", i))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda **kw: calls.setdefault("init", kw))
    monkeypatch.setattr(dist, "get_backend", lambda *a: calls["init"]["backend"])
    g = Group(Launch(1, 2, 1, 2), "musa").start()
    assert (g.backend, calls["device"], "device_id" in calls["init"]) == ("mccl", 1, False)
