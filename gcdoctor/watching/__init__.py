"""The user's own training loop: `gcdoctor.watch`, the Trainer callback, `gcdoctor watch -- python train.py`, one run directory per rank."""
