"""gcdoctor: is gradient checkpointing doing what you think it does on this hardware?"""

__version__ = "0.1.0"
