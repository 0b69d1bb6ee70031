"""dflash_tune: the dflash-tune kernel cache's tuned CUDA kernels as PyTorch operators.

The compiled part (libdflash_tune_ops.so, loaded here) registers the ``torch.ops.dflash_tune`` operators; their
Python entry points, with the signatures of the code people already have, are in :mod:`dflash_tune.ops`. Every launch
runs the tuned winner read from the kernel cache (``$DFLASH_CACHE_DIR``, else ``$XDG_CACHE_HOME/dflash-tune``, else
``~/.cache/dflash-tune``: the directory ``dflash-tune`` and ``dflash-train`` use); nothing is compiled or tuned at
call time unless asked (``tune_missing=True``, :func:`warmup`). A missing key raises :class:`MissingKernelError`
naming the key and the exact ``dflash-tune warmup`` command.
"""
from pathlib import Path

import torch

_HERE = Path(__file__).resolve().parent
torch.ops.load_library(str(_HERE / "libdflash_tune_ops.so"))

from ._errors import MissingKernelError  # noqa: E402
from ._cache import cache_dir, kernel_problems, missing_kernels, require, warmup  # noqa: E402
from . import ops  # noqa: E402

__all__ = ["MissingKernelError", "cache_dir", "kernel_problems", "missing_kernels", "require", "warmup", "ops",
           "binary"]


def binary() -> Path:
    """The dflash-tune executable installed with the package."""
    return _HERE / "bin" / "dflash-tune"
