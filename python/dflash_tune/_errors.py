"""MissingKernelError: a launch (or a cache check) needs a tuned kernel the cache lacks.

The one place that reads the kernel provider's NotFound text (tuner/kernel_provider.cc: "no tuned kernel for NAME
(key DIGEST); fill it with: COMMAND") into a typed exception.
"""
import re


class MissingKernelError(RuntimeError):
    """A tuned kernel is missing from the cache. ``key``: its digest (prefix); ``command``: the exact
    ``dflash-tune warmup`` command that fills it; ``keys`` / ``commands``: all of them when several are missing."""

    def __init__(self, message: str, keys, commands):
        super().__init__(message)
        self.keys = list(keys)
        self.commands = list(commands)
        self.key = self.keys[0] if self.keys else None
        self.command = self.commands[0] if self.commands else None


def from_text(text: str):
    """The MissingKernelError that `text` (a provider NotFound, possibly inside a c10::Error) describes, or None."""
    keys, commands = [], []
    for line in text.splitlines():
        m = re.search(r"no tuned kernel for .+? \(key ([0-9a-f]+)\); fill it with: (dflash-tune warmup .*)$", line)
        if m:
            keys.append(m.group(1))
            commands.append(m.group(2))
    if not keys:
        return None
    message = "missing tuned kernel(s) in the dflash-tune cache; fill them with:\n" + "\n".join(
        "  " + c for c in commands) + "\n(or pass tune_missing=True / call dflash_tune.warmup)"
    return MissingKernelError(message, keys, commands)
