"""Trace metrics checked against values worked out by hand on tests/data/handmade-trace.json.

The trace, in microseconds after its base time (one device, compute stream 7, copy stream 20;
host threads 1 = main, 2 = autograd):

    ProfilerStep#5 [0, 200) t1;  gcdoctor/forward [1, 61) t1;  gcdoctor/backward [62, 192) t1;
    gcdoctor/recompute/layer0 [70, 98) t2 (and its gpu_user_annotation [79.999, 100.001))

    launch (thread, start, dur)  ->  op on the device (stream, start, dur)
    L11 t1  2    5    k1  s7  10      20
    L12 t1  8    4    k2  s7  30.5     2
    L13 t1 40    3    k3  s7  45       1
    L14 t1 47    6    HtoD pageable memcpy s20 50 10, 1,000,000 bytes
    L15 t1 48    2    k4  s7  55      10
    L16 t2 64    5    k5  s7  70       8
    L17 t2 72    4    k6  s7  80      15     (recompute)
    L18 t2 77    4    k7  s7  95.003   4.997 (recompute)
    L19 t2 98.5  1.5  k8  s7 140      40
    L20 t2 150   2    memset s7 181    1, 4096 bytes
    cudaStreamSynchronize t1 [182, 191)
    cpu_ops: t1 [1.5, 13.5) [1.8, 7.8) [46.5, 54.5); t2 [63.5, 103.5) [149, 153)

Device busy (union of all ops): [10,30) [30.5,32.5) [45,46) [50,65) [70,78) [80,95) [95.003,100)
[140,180) [181,182) = 106.997 over the device window [10, 182) = 172, so idle 65.003:
    30 -> 30.5   0.5    k2 launched at 8, before the device went idle: short gap
    32.5 -> 45  12.5    k3 launched at 40 > 32.5: host wait
    46 -> 50     4      memcpy launched at 47 > 46: host wait
    65 -> 70     5      k5 launched at 64 < 65: short gap
    78 -> 80     2      short gap
    95 -> 95.003 0.003  short gap (3 ns: lost if rounded to whole microseconds)
    100 -> 140  40      k8 launched at 98.5 < 100, gap >= 30 us: other
    180 -> 181   1      short gap
    host wait 16.5, short gaps 8.503, other 40.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcdoctor.trace import available_windows, compute_metrics, load_trace

HANDMADE = Path(__file__).parent / "data" / "handmade-trace.json"


@pytest.fixture(scope="module")
def metrics():
    return compute_metrics(load_trace(HANDMADE))


def test_windows_are_the_trace_the_step_and_each_label(metrics):
    assert list(metrics) == ["all", "steady", "step:5", "forward", "backward", "recompute"]
    assert [m.window_source for m in metrics.values()] == ["trace", "steady_steps", "profiler_step", "labels", "labels",
                                                             "labels"]


def test_device_busy_and_idle_split(metrics):
    m = metrics["all"]
    assert (m.device_window_us, m.busy_us, m.idle_us) == (172.0, 106.997, 65.003)
    assert (m.idle_host_wait_us, m.idle_short_gap_us, m.idle_other_us) == (16.5, 8.503, 40.0)
    assert m.busy_share == 106.997 / 172.0


def test_step_window_covers_the_work_launched_inside_the_step(metrics):
    s, a = metrics["step:5"], metrics["all"]
    assert (s.wall_us, s.device_window_us, s.busy_us, s.idle_host_wait_us) == (200.0, 172.0, 106.997, 16.5)
    assert s.kernel_count == a.kernel_count == 8


def test_kernel_duration_distribution(metrics):
    # kernels: 20, 2, 1, 10, 8, 15, 4.997, 40 us; numpy percentiles (linear interpolation)
    m = metrics["all"]
    assert (m.kernel_count, m.kernel_time_us) == (8, 100.997)
    assert (m.kernel_mean_us, m.kernel_median_us, m.kernel_p10_us, m.kernel_p90_us) == (12.625, 9.0, 1.7, 26.0)


def test_short_kernels_and_launch_latency(metrics):
    # k2 (2 us) and k3 (1 us) run shorter than their launch calls (4 and 3 us): 2 of 8.
    # latency = kernel start - launch end: 3, 18.5, 2, 5, 1, 4, 14.003, 40 us
    m = metrics["all"]
    assert (m.launched_kernel_count, m.short_kernel_share) == (8, 0.25)
    assert (m.launch_latency_median_us, m.launch_latency_p90_us) == (4.5, 24.95)


def test_memcpy_bytes_bandwidth_and_overlap_with_compute(metrics):
    m = metrics["all"]
    assert list(m.memcpy) == ["HtoD"]
    h = m.memcpy["HtoD"]
    assert (h.count, h.time_us, h.bytes, h.bandwidth_gbs) == (1, 10.0, 1_000_000, 100.0)  # 1e6 B / 10 us
    assert (h.pageable_count, h.pageable_bytes, h.pinned_count) == (1, 1_000_000, 0)
    assert h.overlap_us == 5.0  # k4 [55, 65) runs during the copy [50, 60)
    assert (m.copy_time_us, m.copy_overlap_us, m.copy_overlap_share) == (10.0, 5.0, 0.5)
    assert (m.memset.count, m.memset.bytes, m.memset.time_us) == (1, 4096, 1.0)


def test_recompute_share_of_device_time(metrics):
    # recompute ranges launched k6 and k7: device window [80, 100), busy 19.997 us
    r, a = metrics["recompute"], metrics["all"]
    assert (r.device_window_us, r.busy_us, r.kernel_count, r.idle_short_gap_us) == (20.0, 19.997, 2, 0.003)
    assert a.recompute_busy_us == 19.997
    assert a.recompute_share == 19.997 / 106.997
    assert metrics["backward"].recompute_share == 19.997 / 68.997


def test_backward_kernels_launched_from_another_thread_belong_to_backward(metrics):
    """The backward range is on thread 1; its kernels were launched from thread 2."""
    b = metrics["backward"]
    assert (b.device_window_us, b.busy_us, b.kernel_count) == (112.0, 68.997, 4)
    assert (b.idle_host_wait_us, b.idle_short_gap_us, b.idle_other_us) == (0.0, 3.003, 40.0)


def test_forward_window(metrics):
    f = metrics["forward"]
    assert (f.wall_us, f.device_window_us, f.busy_us) == (60.0, 55.0, 38.0)
    assert (f.idle_host_wait_us, f.idle_short_gap_us, f.idle_other_us) == (16.5, 0.5, 0.0)
    assert (f.kernel_count, f.short_kernel_share, f.launch_latency_median_us) == (4, 0.5, 4.0)


def test_per_stream_idle(metrics):
    s7, s20 = metrics["all"].streams
    assert (s7.stream, s7.op_count, s7.kernel_count, s7.busy_us) == (7, 9, 8, 101.997)
    # stream 7 also waits for the host before k4 (46 -> 55: launched at 48)
    assert (s7.idle_host_wait_us, s7.idle_short_gap_us, s7.idle_other_us) == (21.5, 8.503, 40.0)
    # stream 20 idles from the window start until its copy (launched after it) and after it
    assert (s20.stream, s20.busy_us, s20.idle_host_wait_us, s20.idle_other_us) == (20, 10.0, 40.0, 122.0)


def test_host_side_metrics(metrics):
    a, f, b, r = metrics["all"], metrics["forward"], metrics["backward"], metrics["recompute"]
    assert (a.wall_us, a.cpu_op_count, a.cpu_busy_us) == (200.0, 5, 64.0)  # nested ops counted once
    assert (a.runtime_call_count, a.runtime_call_us, a.sync_call_us) == (11, 45.5, 9.0)
    assert (f.cpu_op_count, f.cpu_busy_us, f.runtime_call_count, f.runtime_call_us) == (3, 20.0, 5, 20.0)
    assert (b.cpu_busy_us, b.sync_call_us) == (44.0, 9.0)
    assert (r.wall_us, r.cpu_op_count, r.cpu_busy_us) == (28.0, 0, 28.0)  # inside a longer op of thread 2


def test_short_gap_threshold_is_a_parameter():
    m = compute_metrics(load_trace(HANDMADE), short_gap_us=1.0)["all"]
    # only the 0.5 and 0.003 us gaps stay short; the 5, 2 and 1 us gaps become "other"
    assert (m.idle_host_wait_us, m.idle_short_gap_us, m.idle_other_us) == (16.5, 0.503, 48.0)
    assert m.short_gap_threshold_us == 1.0


def test_windows_argument_selects_windows():
    t = load_trace(HANDMADE)
    assert available_windows(t) == ["all", "step:5", "forward", "backward", "recompute"]
    assert list(compute_metrics(t, windows=["steps", "all"])) == ["all", "step:5"]
    only = compute_metrics(t, windows=["backward"])
    assert only["backward"].recompute_share == 19.997 / 68.997  # recompute still located


def test_gpu_annotations_locate_labels_when_launches_cannot(tmp_path):
    """Without runtime events nothing joins by correlation: the gpu_user_annotation ranges are used."""
    doc = json.loads(HANDMADE.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "cuda_runtime"]
    p = tmp_path / "no-runtime.json"
    p.write_text(json.dumps(doc))
    m = compute_metrics(load_trace(p))
    r = m["recompute"]
    assert r.window_source == "gpu_annotation"
    assert (r.device_window_us, r.busy_us, r.kernel_count) == (20.002, 19.997, 2)
    assert m["forward"].device_unavailable == "no device work was launched inside this window"
    assert m["all"].launched_kernel_count == 0 and m["all"].short_kernel_share is None


def test_cpu_only_trace_gives_host_metrics_and_says_why_device_metrics_are_missing(tmp_path):
    doc = json.loads(HANDMADE.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation")]
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps(doc))
    m = compute_metrics(load_trace(p))
    a = m["all"]
    assert (a.device_kind, a.busy_us, a.kernel_count) == (None, None, None)
    assert a.device_unavailable == "the trace has no device events (a CPU-only profile)"
    assert (a.wall_us, a.cpu_busy_us, m["forward"].cpu_busy_us) == (200.0, 64.0, 20.0)
