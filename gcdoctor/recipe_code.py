"""The recipe as code for the three ways people train (`gcdoctor recipe RUN --format hf|pytorch|json`):
Hugging Face TrainingArguments plus the environment, a plain PyTorch snippet, and JSON for tools.

Torch-free: it writes text. The PyTorch snippet applies the policy the way the policy search did
(each decoder layer's forward, or its attention or MLP, under non-reentrant `checkpoint`; op-level
selective checkpointing saves the matmul and attention outputs; the compiler's activation memory
budget compiles each decoder layer) and defines the optimizer, the loss and one optimizer step over
the accumulated micro-batches. A run recorded before the policy search gets its recipe from the
batch sweep (checkpointing off or every layer), the allocator probe and the optimizer probe.
"""
from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from typing import Any

from gcdoctor.facts import Facts
from gcdoctor.facts.against import AgainstFacts
from gcdoctor.facts.policies import (PolicyCandidate, PolicyFacts, PolicySetting, RecipeChoice,
                                     RecipeConfirmation)
from gcdoctor.recipe import describe, pick, policy_words

FORMATS = ("pytorch", "hf", "json")
LOSS_CHUNKS = 8
# the ops whose outputs op-level selective checkpointing keeps (the rest is recomputed)
SAVE_OPS = ("mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
            "_scaled_dot_product_flash_attention_for_cpu", "_flash_attention_forward", "_efficient_attention_forward")


@dataclass
class Recipe:
    """What the code is written from: the choice, its confirmation, and where it came from."""

    choice: RecipeChoice
    confirmation: RecipeConfirmation | None
    source: str  # "policy search" | "batch sweep (no policy search recorded)"
    facts: Facts
    alternatives: list[RecipeChoice]

    @property
    def confirmation_rejected(self) -> bool:
        """The fresh process ran it but too far from the prediction (no other setting was left)."""
        return self.confirmation is not None and bool(self.confirmation.rejected)


def policies_from_sweep(facts: Facts) -> PolicyFacts:
    """A run without a policy search: its sweep's points (no checkpointing / every layer), the
    allocator probe's fresh expandable-segments points and the optimizer probe's fused AdamW, as
    candidates (each measured on the full model, none composed)."""
    opt = facts.settings.optimizer or "adamw"
    pf = PolicyFacts(target_batch=facts.sweep.target_batch if facts.sweep is not None else None)
    names = {"no_gc": "none", "gc": "layer"}

    def add(variant: str, allocator: str, optimizer: str, m: Any) -> None:
        if variant in names and m.fits and m.tokens_per_s:
            pf.candidates.append(PolicyCandidate(setting=PolicySetting(names[variant], allocator, optimizer),
                                                 largest_batch=m.batch_size, measurement=m))

    for m in facts.sweep.measurements if facts.sweep is not None else []:
        add(m.variant, "default", opt, m)
    for run in facts.allocator.runs if facts.allocator is not None else []:
        if run.allocator == "expandable":
            for m in run.measurements:
                add(run.variant, "expandable", opt, m)
    o = facts.optimizer
    if o is not None and opt == "adamw":
        for m in o.measurements:
            if m.variant != "adamw":
                add(o.checkpointing, "default", m.variant, m)
    return pf


def recipe_of(facts: Facts) -> Recipe | None:
    """The run's recipe (the policy search's, else one from the sweep), or None when nothing fits."""
    pf, source = facts.policies, "policy search"
    if pf is None or not pf.candidates:
        pf, source = policies_from_sweep(facts), "batch sweep (no policy search recorded)"
    devices = facts.distributed.world_size if facts.distributed is not None else 1
    choice, conf, ranked = pick(pf, seq_len=facts.settings.seq_len or 1, devices=devices)
    if choice is None:
        return None
    return Recipe(choice, conf, source, facts, [c for c in ranked if c is not choice][:4])


# -- the environment ---------------------------------------------------------------------------

def environment(recipe: Recipe) -> dict[str, str]:
    if recipe.choice.setting.allocator != "expandable":
        return {}
    from gcdoctor.model.allocator import expandable_setting
    name, _, value = expandable_setting(recipe.facts.environment.device_kind or "cuda").partition("=")
    return {name: value}


def _env_code(recipe: Recipe) -> list[str]:
    env = environment(recipe)
    if not env:
        return []
    out = ["import os", "", "# the allocator setting: in the environment before torch initialises the device"]
    for name, value in env.items():
        key = value.split(":", 1)[0]
        out += [f"_conf = os.environ.get({name!r}, '')",
                f"if {key!r} not in _conf:",
                f"    os.environ[{name!r}] = ','.join(x for x in (_conf, {value!r}) if x)"]
    return out + [""]


# -- the policy --------------------------------------------------------------------------------

_WRAP = '''

def _wrap(module, make):
    """Replace module.forward, in training only, by make(original forward)."""
    original = module.forward
    wrapped = make(original)

    @functools.wraps(original)
    def forward(*args, **kwargs):
        if module.training and torch.is_grad_enabled():
            return wrapped(*args, **kwargs)
        return original(*args, **kwargs)
    module.forward = forward


def _checkpointed(module, **checkpoint_kwargs):
    """Run module's forward under non-reentrant activation checkpointing."""
    _wrap(module, lambda f: functools.partial(checkpoint, f, use_reentrant=False, **checkpoint_kwargs))
'''

_SELECTIVE = '''

def _save_ops():
    found = set()
    for name in {ops!r}:
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None and hasattr(packet, "default"):
            found.add(packet.default)
    return found


_SAVE = _save_ops()


def _policy(ctx, op, *args, **kwargs):
    """Keep the matmul and attention outputs; recompute the pointwise ops in the backward."""
    return CheckpointPolicy.MUST_SAVE if op in _SAVE else CheckpointPolicy.PREFER_RECOMPUTE
'''


def _policy_body(policy: str) -> tuple[list[str], str, str]:
    """(imports, helper code, apply_recipe's loop body over `i, layer`) for a policy."""
    base = ["import functools", "import torch", "from torch.utils.checkpoint import checkpoint"]
    if policy == "none":
        return ["import torch"], "", "    pass  # no checkpointing: every activation is kept for the backward"
    if policy == "layer":
        return base, _WRAP, "    _checkpointed(layer)"
    if policy.startswith("every-"):
        n = int(policy.split("-", 1)[1])
        return base, _WRAP, f"    if i % {n} == 0:  # layers 0, {n}, {2 * n}, ...\n        _checkpointed(layer)"
    if policy == "attn-only":
        return base, _WRAP, "    _checkpointed(layer.self_attn)"
    if policy == "mlp-only":
        return base, _WRAP, "    _checkpointed(layer.mlp)"
    if policy == "selective-op":
        imports = base + ["from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts"]
        return imports, _WRAP + _SELECTIVE.format(ops=SAVE_OPS), (
            "    _checkpointed(layer, context_fn=functools.partial(create_selective_checkpoint_contexts, _policy))")
    if policy.startswith("budget-"):
        frac = float(policy.split("-", 1)[1])
        return (["import torch", "import torch._functorch.config"], "",
                f"    torch._functorch.config.activation_memory_budget = {frac!r}  # read when the layer compiles\n"
                "    layer.compile()")
    if policy == "cpu-offload":
        return base, _WRAP, ("    def offloaded(f):\n"
                             "        def run(*args, **kwargs):\n"
                             "            with torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available()):\n"
                             "                return f(*args, **kwargs)\n"
                             "        return run\n"
                             "    _wrap(layer, offloaded)")
    raise ValueError(f"unknown checkpointing policy {policy!r}")


def _apply_code(recipe: Recipe) -> tuple[list[str], str]:
    policy = recipe.choice.setting.policy
    imports, helpers, body = _policy_body(policy)
    loop = ("" if policy == "none" else
            "    for i, layer in enumerate(model.model.layers):\n" + textwrap.indent(body, "    ") + "\n")
    code = helpers + f'''

def apply_recipe(model):
    """Checkpointing: {policy_words(policy)}. Call once on the model, before training."""
{loop}    return model
'''
    return imports, code


# -- the optimizer and the loss ----------------------------------------------------------------

def _optimizer_code(setting: PolicySetting) -> str:
    kw = {"adamw-fused": ", fused=True", "adamw-forloop": ", foreach=False"}.get(setting.optimizer, "")
    if setting.optimizer == "sgd":
        return ('''

def make_optimizer(model, lr=1e-4):
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
''')
    return f'''

def make_optimizer(model, lr=1e-4):
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr{kw})
'''


_CHUNKED = f'''

def _chunk_loss(hidden, labels, weight, bias):
    logits = torch.nn.functional.linear(hidden, weight, bias).float()
    return torch.nn.functional.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")


def chunked_causal_lm_loss(model, input_ids, labels=None, chunks={LOSS_CHUNKS}):
    """The causal-LM loss in chunks of tokens, each recomputed in the backward: one chunk's logits
    exist at a time instead of all [tokens x vocab] of them, with the same result."""
    labels = input_ids if labels is None else labels
    hidden = model.model(input_ids=input_ids, use_cache=False).last_hidden_state
    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    y = labels[:, 1:].reshape(-1)
    size = max(1, -(-len(y) // chunks))
    total = None
    for hc, yc in zip(h.split(size), y.split(size)):
        part = torch.utils.checkpoint.checkpoint(_chunk_loss, hc, yc, model.lm_head.weight, model.lm_head.bias,
                                                 use_reentrant=False)
        total = part if total is None else total + part
    return total / (y != -100).sum().clamp(min=1)
'''


def _loss_code(setting: PolicySetting) -> str:
    if setting.chunked_loss:
        return _CHUNKED + '''

def compute_loss(model, input_ids):
    return chunked_causal_lm_loss(model, input_ids)
'''
    return '''

def compute_loss(model, input_ids):
    return model(input_ids=input_ids, labels=input_ids, use_cache=False).loss
'''


_STEP = '''

def train_step(model, optimizer, micro_batches):
    """One optimizer step over ACCUMULATION micro-batches of MICRO_BATCH sequences of SEQ_LEN tokens."""
    for input_ids in micro_batches:
        loss = compute_loss(model, input_ids) / ACCUMULATION
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach() * ACCUMULATION
'''


def _header(recipe: Recipe) -> list[str]:
    f, c, conf = recipe.facts, recipe.choice, recipe.confirmation
    where = ", ".join(x for x in (f.model.name if f.model else "", f.environment.device_name,
                                  f"seq {f.settings.seq_len}" if f.settings.seq_len else "", f.settings.dtype) if x)
    if conf is not None and conf.tokens_per_s and conf.rejected:
        off = f" ({conf.off_pct:+.0f} %)" if conf.off_pct is not None else ""
        fig = (f"{conf.tokens_per_s:,.0f} tok/s in a fresh process against {c.predicted_tokens_per_s or 0:,.0f} "
               f"predicted{off}: not confirmed")
    elif conf is not None and conf.tokens_per_s:
        fig = f"{conf.tokens_per_s:,.0f} tok/s confirmed in a fresh process (predicted {c.predicted_tokens_per_s:,.0f})"
    else:
        fig = f"{c.predicted_tokens_per_s or 0:,.0f} tok/s predicted, unconfirmed"
    return [f"# gcdoctor recipe: {describe(c)}", f"# {fig}", f"# measured on {where}; from the {recipe.source}",
            f"# target: {c.target}"]


def pytorch_code(recipe: Recipe) -> str:
    c = recipe.choice
    imports, apply = _apply_code(recipe)
    if "import torch" not in imports:
        imports = ["import torch"] + imports
    lines = _header(recipe) + [""] + _env_code(recipe)
    lines += sorted(set(imports), key=lambda s: (not s.startswith("import "), s))
    lines += ["", f"MICRO_BATCH = {c.micro_batch}  # sequences per device per forward/backward",
              f"ACCUMULATION = {c.accumulation}  # micro-batches per optimizer step",
              f"SEQ_LEN = {recipe.facts.settings.seq_len or 0}"]
    text = "\n".join(lines) + "\n" + apply + _optimizer_code(c.setting) + _loss_code(c.setting) + _STEP
    return text


# -- Hugging Face --------------------------------------------------------------------------------

_HF_OPTIM = {"adamw": "adamw_torch", "adamw-fused": "adamw_torch_fused", "adamw-forloop": "adamw_torch",
             "sgd": "sgd"}


def hf_code(recipe: Recipe) -> str:
    c, st = recipe.choice, recipe.facts.settings
    s = c.setting
    layer = s.policy == "layer"
    lines = _header(recipe) + [""] + _env_code(recipe) + (["import inspect", ""] if layer else [])
    lines += ["from transformers import TrainingArguments", ""]
    args = [f"    output_dir={'gcdoctor-recipe-out'!r},",
            f"    per_device_train_batch_size={c.micro_batch},",
            f"    gradient_accumulation_steps={c.accumulation},",
            f"    optim={_HF_OPTIM.get(s.optimizer, 'adamw_torch')!r},"]
    if st.dtype == "bf16":
        args.append("    bf16=True,")
    elif st.dtype == "fp16":
        args.append("    fp16=True,")
    if layer:
        lines += ["# transformers 5.24 renamed gradient_checkpointing to activation_checkpointing",
                  "_CKPT = ('activation_checkpointing' if 'activation_checkpointing' in "
                  "inspect.signature(TrainingArguments).parameters",
                  "         else 'gradient_checkpointing')", ""]
        args.append("    **{_CKPT: True, _CKPT + '_kwargs': {'use_reentrant': False}},")
    lines += ["args = TrainingArguments("] + args + [")"]
    text = "\n".join(lines) + "\n"
    if not layer and s.policy != "none":
        imports, apply = _apply_code(recipe)
        text += ("\n# TrainingArguments has no switch for this policy: apply it to the model yourself, before\n"
                 "# Trainer(model=model, args=args, ...), and leave TrainingArguments' checkpointing off.\n")
        text += "\n".join(sorted(set(imports), key=lambda x: (not x.startswith("import "), x))) + "\n" + apply
    if s.chunked_loss:
        text += ("\nimport torch\nfrom transformers import Trainer\n" + _CHUNKED + '''

class ChunkedLossTrainer(Trainer):
    """Trainer whose loss never holds all the logits at once: use it in place of Trainer."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = chunked_causal_lm_loss(model, inputs["input_ids"], inputs.get("labels"))
        return (loss, None) if return_outputs else loss
''')
    return text


# -- JSON ----------------------------------------------------------------------------------------

def _choice_dict(c: RecipeChoice) -> dict[str, Any]:
    return {"policy": c.setting.policy, "allocator": c.setting.allocator, "optimizer": c.setting.optimizer,
            "chunked_loss": c.setting.chunked_loss, "micro_batch": c.micro_batch, "accumulation": c.accumulation,
            "target": c.target, "predicted_tokens_per_s": c.predicted_tokens_per_s,
            "predicted_peak_bytes": c.predicted_peak_bytes, "summary": describe(c)}


def json_text(recipe: Recipe) -> str:
    f, conf = recipe.facts, recipe.confirmation
    data = {
        "recipe": _choice_dict(recipe.choice),
        "confirmed": None if conf is None or recipe.confirmation_rejected else {
            "tokens_per_s": conf.tokens_per_s, "peak_allocated_bytes": conf.peak_allocated_bytes,
            "peak_reserved_bytes": conf.peak_reserved_bytes, "off_pct": conf.off_pct},
        "fresh_process": None if conf is None else {
            "tokens_per_s": conf.tokens_per_s, "peak_allocated_bytes": conf.peak_allocated_bytes,
            "off_pct": conf.off_pct, "rejected": conf.rejected},
        "environment": environment(recipe),
        "source": recipe.source,
        "model": f.model.name if f.model else None,
        "device": f.environment.device_name or f.environment.device_kind or None,
        "seq_len": f.settings.seq_len or None,
        "dtype": f.settings.dtype or None,
        "alternatives": [_choice_dict(c) for c in recipe.alternatives],
    }
    return json.dumps(data, indent=1) + "\n"


def render(recipe: Recipe, fmt: str) -> str:
    if fmt == "pytorch":
        return pytorch_code(recipe)
    if fmt == "hf":
        return hf_code(recipe)
    if fmt == "json":
        return json_text(recipe)
    raise ValueError(f"unknown format {fmt!r}")


def against_facts(run_dir: str) -> AgainstFacts:
    """The diagnose run's recipe, for a watched job to be held against (--against); one-line
    UserErrors for a folder that is not a diagnose run."""
    from pathlib import Path

    from gcdoctor.errors import UserError
    p = Path(run_dir)
    if not (p / "facts.json").is_file():
        raise UserError(f"--against {run_dir}: not a gcdoctor run directory (no facts.json)")
    facts = Facts.load(p / "facts.json")
    if facts.watch is not None or (facts.policies is None and facts.sweep is None):
        raise UserError(f"--against {run_dir}: not a gcdoctor diagnose run (no policy search or batch sweep)")
    recipe = recipe_of(facts)
    m = facts.model
    return AgainstFacts(run_dir=str(run_dir), source=recipe.source if recipe else "", model=m.name if m else "",
                        n_params=m.n_params if m and m.n_params else None,
                        device_name=facts.environment.device_name, seq_len=facts.settings.seq_len or None,
                        dtype=facts.settings.dtype, recipe=recipe.choice if recipe else None,
                        confirmation=recipe.confirmation if recipe and not recipe.confirmation_rejected else None,
                        reason="" if recipe else "no measured setting fits")
