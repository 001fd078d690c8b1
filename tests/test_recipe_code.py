"""`gcdoctor recipe`: the recipe as a PyTorch snippet (run here on tiny-llama, checked to apply the
policy), as Hugging Face TrainingArguments (valid Python that constructs them) and as JSON."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gcdoctor.cli import main
from gcdoctor.facts import Facts
from gcdoctor.facts.policies import PolicySetting, RecipeChoice
from gcdoctor.model.registry import build_model, load_spec
from gcdoctor.recipe_code import Recipe, hf_code, json_text, pytorch_code, recipe_of

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SEQ = 32


def recipe(policy="layer", optimizer="adamw", allocator="default", chunked=False, micro=2, accumulation=1,
           dtype="fp32") -> Recipe:
    facts = Facts()
    facts.settings.seq_len, facts.settings.dtype, facts.environment.device_kind = SEQ, dtype, "cuda"
    choice = RecipeChoice(PolicySetting(policy, allocator, optimizer, chunked), micro, accumulation, "test", 1000.0)
    return Recipe(choice, None, "policy search", facts, [])


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        self.n[name] = self.n.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


_MODEL = []


def tiny():
    """A fresh copy of one tiny-llama (building it again costs seconds of initialisation)."""
    if not _MODEL:
        _MODEL.append(build_model(load_spec("tiny-llama"), "fp32", "cpu"))
    return copy.deepcopy(_MODEL[0])


def run(code: str):
    """Exec the snippet, apply it to tiny-llama, run one optimizer step; what each module's forward
    ran (calls per decoder layer's attention and MLP) and the aten ops of the step."""
    ns: dict = {}
    exec(compile(code, "<recipe>", "exec"), ns)
    model = tiny()
    ns["apply_recipe"](model)
    calls: dict[str, int] = {}
    for i, layer in enumerate(model.model.layers):
        # the first projection of each part, counted as it starts: a checkpointed module's own hooks do not
        # fire in the recompute (it runs the forward, not the module), and non-reentrant checkpoint stops
        # the recompute once the last saved tensor is back, before the part's last module returns
        for part, first in (("self_attn", layer.self_attn.q_proj), ("mlp", layer.mlp.gate_proj)):
            first.register_forward_pre_hook(lambda m, a, k=f"{i}.{part}": calls.__setitem__(k, calls.get(k, 0) + 1))
    opt = ns["make_optimizer"](model)
    torch.manual_seed(0)
    batches = [torch.randint(0, 4096, (ns["MICRO_BATCH"], ns["SEQ_LEN"])) for _ in range(ns["ACCUMULATION"])]
    with CountOps() as ops:
        loss = ns["train_step"](model, opt, batches)
    assert torch.isfinite(loss)
    return ns, model, opt, calls, ops.n


@pytest.fixture(scope="module")
def baseline():
    return run(pytorch_code(recipe("none")))


def matmuls(ops: dict[str, int]) -> int:
    return sum(ops.get(k, 0) for k in ("mm", "addmm", "bmm"))


@pytest.mark.parametrize("policy, doubled", [
    ("layer", {"0.self_attn", "0.mlp", "1.self_attn", "1.mlp", "2.self_attn", "2.mlp", "3.self_attn", "3.mlp"}),
    ("every-2", {"0.self_attn", "0.mlp", "2.self_attn", "2.mlp"}),
    ("attn-only", {"0.self_attn", "1.self_attn", "2.self_attn", "3.self_attn"}),
    ("mlp-only", {"0.mlp", "1.mlp", "2.mlp", "3.mlp"}),
])
def test_the_pytorch_snippet_recomputes_what_the_policy_claims(policy, doubled, baseline):
    _, _, _, calls, ops = run(pytorch_code(recipe(policy)))
    assert {k for k, n in calls.items() if n == 2} == doubled
    assert {k for k, n in calls.items() if n == 1} == set(calls) - doubled
    assert matmuls(ops) > matmuls(baseline[4])  # the recomputed forward's matmuls ran again


def test_selective_op_keeps_the_matmuls_and_recomputes_the_pointwise_ops(baseline):
    _, _, _, calls, ops = run(pytorch_code(recipe("selective-op")))
    assert set(calls.values()) == {2}  # every layer's forward ran again in the backward...
    assert matmuls(ops) == matmuls(baseline[4])  # ...without one more matmul
    pointwise = ("mul", "silu", "rsqrt", "pow")
    assert sum(ops.get(k, 0) for k in pointwise) > sum(baseline[4].get(k, 0) for k in pointwise)


def test_no_checkpointing_runs_each_forward_once(baseline):
    assert set(baseline[3].values()) == {1}


def test_the_whole_setting_environment_fused_adamw_accumulation_and_chunked_loss(monkeypatch):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    code = pytorch_code(recipe("every-2", "adamw-fused", "expandable", chunked=True, micro=1, accumulation=3))
    ns, model, opt, calls, _ = run(code)
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert opt.defaults["fused"] is True
    assert (ns["MICRO_BATCH"], ns["ACCUMULATION"]) == (1, 3)
    assert calls["0.mlp"] == 6 and calls["1.mlp"] == 3  # three micro-batches, layer 0 recomputed
    ids = torch.randint(0, 4096, (2, SEQ))
    with torch.no_grad():
        assert torch.allclose(ns["compute_loss"](model, ids), model(input_ids=ids, labels=ids).loss, atol=1e-5)


def test_the_compiler_budget_and_offload_snippets_are_valid_python():
    code = pytorch_code(recipe("budget-0.5"))
    assert "torch._functorch.config.activation_memory_budget = 0.5" in code and "layer.compile()" in code
    compile(code, "<recipe>", "exec")
    run(pytorch_code(recipe("cpu-offload")))  # runs (on the CPU the saved tensors stay where they are)


def test_the_hf_code_constructs_training_arguments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(hf_code(recipe("layer", "adamw-fused", micro=3, accumulation=2)), "<hf>", "exec"), ns)
    a = ns["args"]
    assert (a.per_device_train_batch_size, a.gradient_accumulation_steps, a.optim.value) == (3, 2, "adamw_torch_fused")
    assert a.gradient_checkpointing and a.gradient_checkpointing_kwargs == {"use_reentrant": False}
    # a policy TrainingArguments cannot say: the apply function and the chunked-loss Trainer come with it
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    ns = {}
    exec(compile(hf_code(recipe("attn-only", allocator="expandable", chunked=True)), "<hf>", "exec"), ns)
    assert not ns["args"].gradient_checkpointing and os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    model = ns["apply_recipe"](tiny())
    assert all("forward" in layer.self_attn.__dict__ and "forward" not in layer.mlp.__dict__
               for layer in model.model.layers)
    assert issubclass(ns["ChunkedLossTrainer"], __import__("transformers").Trainer)
    compile(hf_code(recipe("layer", dtype="bf16")), "<hf>", "exec")


def test_json_and_the_command_on_a_recorded_run(capsys):
    assert main(["recipe", str(SAMPLES / "h200-llama3-8b-diagnose-w3"), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recipe"]["summary"] == "no checkpointing, batch 2"
    assert (data["source"], data["confirmed"], data["environment"]) == (
        "batch sweep (no policy search recorded)", None, {})
    assert data["recipe"]["predicted_tokens_per_s"] == pytest.approx(9346.07, abs=0.01)
    facts = Facts.load(SAMPLES / "h200-llama3-8b-diagnose-w3" / "facts.json")
    assert json.loads(json_text(recipe_of(facts))) == data
    for fmt in ("pytorch", "hf"):
        assert main(["recipe", str(SAMPLES / "h200-llama3-8b-diagnose-w3"), "--format", fmt]) == 0
        compile(capsys.readouterr().out, "<out>", "exec")


@pytest.mark.parametrize("args, message", [
    (["/no/such/run"], "gcdoctor: error: /no/such/run: not a run directory (give the folder gcdoctor diagnose wrote)"),
    ([str(SAMPLES)], f"gcdoctor: error: {SAMPLES}: no facts.json: not a gcdoctor run directory"),
    ([str(SAMPLES / "h200-memory-w3" / "limit48")],
     f"gcdoctor: error: {SAMPLES / 'h200-memory-w3' / 'limit48'}: no recipe: no measured setting fits (see its "
     "report's bottom line)"),
])
def test_a_bad_run_is_one_line_and_exit_2(args, message, capsys):
    assert main(["recipe"] + args) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [message]
