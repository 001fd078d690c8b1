"""Example: watch a Hugging Face Trainer job with gcdoctor's callback.

    python samples/watch/train_with_trainer.py --out runs/trainer-cpu                     # CPU, tiny model
    python samples/watch/train_with_trainer.py --model llama3-8b --layers 4 --seq-len 2048 \
        --gc --out runs/trainer-gpu                                                       # GPU
    gcdoctor analyze runs/trainer-cpu          # verdicts
    gcdoctor monitor --run runs/trainer-cpu    # live view (run it while training)

Random weights and random tokens: the point is the system behaviour, not the loss.
"""
from __future__ import annotations

import argparse

import torch
from transformers import Trainer, TrainingArguments

from gcdoctor.hf import GcdoctorCallback
from gcdoctor.models import build_model, load_spec


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        self.ids = torch.randint(vocab, (n, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--gc", action="store_true", help="turn on gradient checkpointing in the Trainer")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    gpu = torch.cuda.is_available()
    spec = load_spec(args.model, layers=args.layers)
    model = build_model(spec, "bf16" if gpu else "fp32", "cuda" if gpu else "cpu")
    targs = TrainingArguments(
        output_dir=f"{args.out}-hf", max_steps=args.steps, per_device_train_batch_size=args.batch,
        logging_steps=1, report_to=[], save_strategy="no", disable_tqdm=True, use_cpu=not gpu,
        gradient_checkpointing=args.gc, gradient_checkpointing_kwargs={"use_reentrant": False} if args.gc else None,
        bf16=False, dataloader_num_workers=0, learning_rate=1e-4)
    trainer = Trainer(model=model, args=targs, train_dataset=RandomTokens(args.steps * args.batch, args.seq_len,
                                                                          spec.vocab_size),
                      callbacks=[GcdoctorCallback(out=args.out, profile_steps=(5, 6))])
    trainer.train()
    print(f"run directory: {args.out}")


if __name__ == "__main__":
    main()
