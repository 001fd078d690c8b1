"""gcdoctor: is gradient checkpointing doing what you think it does on this hardware?

`gcdoctor.watch(model, optimizer, out=...)` records a user's own training loop (gcdoctor.watching.watcher);
`gcdoctor.watching.hf.GcdoctorCallback` does the same for a Hugging Face Trainer. Importing gcdoctor itself
stays light: torch is imported only when `watch` is first used. `gcdoctor.load(path)` (gcdoctor.report.frames)
gives a run directory or a trace as pandas DataFrames, for notebooks.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("watch", "Watcher"):
        import importlib
        return getattr(importlib.import_module("gcdoctor.watching.watcher"), name)
    if name in ("load", "Run"):
        import importlib
        return getattr(importlib.import_module("gcdoctor.report.frames"), name)
    raise AttributeError(f"module 'gcdoctor' has no attribute {name!r}")
