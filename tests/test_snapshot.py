"""The memory snapshot's attribution, on a snapshot in torch's format (segments and a trace of
allocations with their Python frames)."""
from __future__ import annotations

from gcdoctor.model.snapshot import attribute, classify

F_LOSS = [{"filename": "/x/transformers/loss/loss_utils.py", "line": 67, "name": "ForCausalLMLoss"}]
F_LAYER = [{"filename": "/x/transformers/models/llama/modeling_llama.py", "line": 160, "name": "forward"}]
F_OPT = [{"filename": "/x/torch/optim/adam.py", "line": 600, "name": "_multi_tensor_adam"}]


def _snapshot():
    segments = [{"address": 0, "blocks": [
        {"size": 1000, "requested_size": 1000, "state": "active_allocated"},  # a parameter
        {"size": 2000, "requested_size": 2000, "state": "active_allocated"},  # an optimizer state
        {"size": 64, "requested_size": 64, "state": "active_allocated"},  # the batch
    ]}]
    trace = [
        {"action": "alloc", "addr": 5000, "size": 300, "frames": F_LAYER},  # saved activation
        {"action": "alloc", "addr": 6000, "size": 800, "frames": F_LOSS},  # log-probs
        {"action": "alloc", "addr": 7000, "size": 1000, "frames": []},  # a gradient (backward)
        {"action": "alloc", "addr": 8000, "size": 50, "frames": []},  # a backward temporary
        {"action": "free_requested", "addr": 8000, "size": 50},
        {"action": "free_requested", "addr": 6000, "size": 800},
        {"action": "alloc", "addr": 9000, "size": 1000, "frames": F_OPT},  # foreach sqrt
        {"action": "free_requested", "addr": 9000, "size": 1000},
        {"action": "free_requested", "addr": 5000, "size": 300},
    ]
    return {"segments": segments, "device_traces": [trace]}


def test_the_logits_are_told_by_their_size():
    snap = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 4096, "frames": F_LAYER}]]}
    assert attribute(snap, {}, loss_sizes={4096}).by_kind_bytes == {"logits and loss": 4096}


def test_the_peak_and_what_is_alive_at_it():
    known = {0: "parameters", 1000: "optimizer states", 7000: "gradients"}
    s = attribute(_snapshot(), known)
    # before: 3064; +300 +800 +1000 +50 = 5214 at the 4th event; the optimizer's 1000 comes after
    # 850 were freed: 5364 at event 7
    assert (s.peak_bytes, s.peak_index, s.entries) == (3064 + 300 + 1000 + 1000, 6, 9)
    assert s.by_kind_bytes == {"parameters": 1000, "optimizer states": 2000, "temporaries": 64,
                               "saved activations": 300, "gradients": 1000, "optimizer temporaries": 1000}
    assert [t.bytes for t in s.largest][:1] == [2000]
    opt = next(t for t in s.largest if t.kind == "optimizer temporaries")
    assert opt.frame == "adam.py:600 _multi_tensor_adam"


def test_frames_name_the_kind_innermost_first():
    assert classify(F_LOSS) == "logits and loss"
    step = {"filename": "/x/gcdoctor/capture.py", "name": "_causal_lm_loss"}  # gcdoctor's step, outermost
    silu = {"filename": "/x/torch/nn/functional.py", "name": "silu"}
    assert classify([silu] + F_LAYER + [step]) == "saved activations"
    assert classify([{"filename": "/x/torch/nn/functional.py", "name": "cross_entropy"}] + F_LAYER) == "logits and loss"
    assert classify(F_LAYER) == "saved activations"
    assert classify(F_OPT) == "optimizer temporaries"
    assert classify([]) == "temporaries"
