"""Example: watch a Hugging Face Trainer job with gcdoctor's callback.

    python samples/watch/train_with_trainer.py --out runs/trainer-cpu                     # CPU, tiny model
    python samples/watch/train_with_trainer.py --model llama3-8b --layers 4 --seq-len 2048 \
        --gc --out runs/trainer-gpu                                                       # GPU
    gcdoctor analyze runs/trainer-cpu          # verdicts
    gcdoctor monitor --run runs/trainer-cpu    # live view (run it while training)

--gc turns on transformers' own checkpointing through TrainingArguments (no gcdoctor labels: the
recompute is found without them); --gc-labelled checkpoints the same layers with gcdoctor's
labelled context_fn instead (the reference the unlabelled share is compared with); --reentrant
uses the reentrant form; --data-ms makes each sample cost that much CPU work in the Dataset (a slow
data pipeline with num_workers=0); --report-to tensorboard sends the callback's gcdoctor/* entries
to TensorBoard with the Trainer's own.

Random weights and random tokens: the point is the system behaviour, not the loss.
"""
from __future__ import annotations

import argparse
import time

import torch
from transformers import Trainer, TrainingArguments

from gcdoctor.watching.hf import GcdoctorCallback
from gcdoctor.model.registry import build_model, load_spec


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int, work_ms: float = 0.0) -> None:
        self.ids = torch.randint(vocab, (n, seq), generator=torch.Generator().manual_seed(0))
        self.work_ms = work_ms

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < self.work_ms:  # tokenising, augmenting: CPU work
            pass
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def checkpointing_args(training_arguments: type, gc: bool, reentrant: bool) -> dict:
    """TrainingArguments' checkpointing settings under the name this transformers has: 5.x renamed
    gradient_checkpointing* to activation_checkpointing* and warns on the old names."""
    import dataclasses
    fields = {f.name for f in dataclasses.fields(training_arguments)}
    name = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    return {name: gc, f"{name}_kwargs": {"use_reentrant": reentrant} if gc else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--gc", action="store_true", help="transformers' gradient checkpointing (TrainingArguments)")
    ap.add_argument("--gc-labelled", action="store_true", help="the same layers, with gcdoctor's labels")
    ap.add_argument("--reentrant", action="store_true", help="use_reentrant=True")
    ap.add_argument("--data-ms", type=float, default=0.0, help="CPU work per sample in the Dataset")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    ap.add_argument("--profile-steps", default="5,6")
    ap.add_argument("--report-to", default="none")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    gpu = torch.cuda.is_available()
    spec = load_spec(args.model, layers=args.layers)
    model = build_model(spec, "bf16" if gpu else "fp32", "cuda" if gpu else "cpu")
    if args.gc_labelled:
        from gcdoctor.run.capture import enable_layer_checkpointing
        enable_layer_checkpointing(model, labelled=True, extra_kwargs={"use_reentrant": args.reentrant})
    ckpt = checkpointing_args(TrainingArguments, args.gc, args.reentrant)
    targs = TrainingArguments(
        output_dir=f"{args.out}-hf", max_steps=args.steps, per_device_train_batch_size=args.batch,
        logging_steps=1, report_to=[] if args.report_to == "none" else [args.report_to], save_strategy="no",
        disable_tqdm=True, use_cpu=not gpu, **ckpt,
        bf16=False, dataloader_num_workers=args.workers, learning_rate=1e-4)
    profile = tuple(int(x) for x in args.profile_steps.split(",") if x)
    data = RandomTokens(args.steps * args.batch, args.seq_len, spec.vocab_size, args.data_ms)
    trainer = Trainer(model=model, args=targs, train_dataset=data,
                      callbacks=[GcdoctorCallback(out=args.out, profile_steps=profile)])
    trainer.train()
    print(f"run directory: {args.out}")


if __name__ == "__main__":
    main()
