"""The kernel cache as the package sees it: which kernels an operation's shape needs, which of them the cache lacks
for an arch, and warmup (the packaged ``dflash-tune warmup``, the same single-flight tuner every process shares).

Shapes are named as in ``torch.ops.dflash_tune.kernel_problems`` (python/csrc/op_shapes.h):
  dflash_attention(ctx_len, num_blocks, block_size=16, window=0, heads_q, heads_kv, head_dim, packed=False)
  causal_conv1d(tokens, channels, num_docs=1)
  gated_delta_rule(tokens, heads, value_heads, num_docs=1)
"""
import os
import subprocess
from pathlib import Path
from typing import List, Optional

import torch

from ._errors import from_text

_DIMS = {
    "dflash_attention": (("ctx_len", None), ("num_blocks", None), ("block_size", 16), ("window", 0),
                         ("heads_q", None), ("heads_kv", None), ("head_dim", None), ("packed", False)),
    "causal_conv1d": (("tokens", None), ("channels", None), ("num_docs", 1)),
    "gated_delta_rule": (("tokens", None), ("heads", None), ("value_heads", None), ("num_docs", 1)),
}


def _dims(operation: str, shape: dict) -> List[int]:
    if operation not in _DIMS:
        raise ValueError(f"dflash_tune: unknown operation {operation!r} (one of {', '.join(_DIMS)})")
    names = [n for n, _ in _DIMS[operation]]
    unknown = set(shape) - set(names)
    if unknown:
        raise TypeError(f"dflash_tune: {operation} has no dim(s) {sorted(unknown)}; its dims: {', '.join(names)}")
    dims = []
    for name, default in _DIMS[operation]:
        value = shape.get(name, default)
        if value is None:
            raise TypeError(f"dflash_tune: {operation} needs {name}= (dims: {', '.join(names)})")
        dims.append(int(value))
    return dims


def _arch(arch: Optional[str]) -> str:
    if arch:
        return arch
    if not torch.cuda.is_available():
        raise ValueError("dflash_tune: no CUDA device here; name the arch (arch='sm_120')")
    major, minor = torch.cuda.get_device_capability()
    return torch.ops.dflash_tune.device_arch(10 * major + minor)  # the operators' own: sm_90a on Hopper


def cache_dir() -> str:
    """The kernel cache directory the operators read ($DFLASH_CACHE_DIR's rules; opened on first use)."""
    return torch.ops.dflash_tune.cache_dir()


def kernel_problems(operation: str, **shape) -> List[str]:
    """The kernels one operation's shape launches, as ``family=problem-JSON`` (what ``--problem`` takes)."""
    return list(torch.ops.dflash_tune.kernel_problems(operation, _dims(operation, shape)))


def missing_kernels(operation: str, arch: Optional[str] = None, **shape) -> List[str]:
    """The cache entries the shape needs and lacks for ``arch`` (default: this GPU's), one line each naming the key
    and its warmup command; empty when all are there."""
    return list(torch.ops.dflash_tune.missing_kernels(operation, _dims(operation, shape), _arch(arch)))


def require(operation: str, arch: Optional[str] = None, **shape) -> None:
    """Raises MissingKernelError (every missing key and its warmup command) unless the cache holds all the kernels
    of the shape for ``arch``: the check a training script makes before its first step."""
    missing = missing_kernels(operation, arch, **shape)
    if missing:
        raise from_text("\n".join(missing))


def warmup(operation: str, arch: Optional[str] = None, compile_only: bool = False, extra_args=(), **shape) -> None:
    """Tunes the kernels of the shape into the cache with the packaged ``dflash-tune warmup`` (single flight with
    any other warmup or training process on the same cache; keys already there are cache hits). Raises
    subprocess.CalledProcessError when the warmup fails (its output went to this process's stdout/stderr)."""
    from . import binary

    command = [str(binary()), "--cache-dir", cache_dir(), "warmup", "--arch", _arch(arch)]
    for problem in kernel_problems(operation, **shape):
        command += ["--problem", problem]
    if compile_only:
        command.append("--compile-only")
    command += list(extra_args)
    subprocess.run(command, check=True, env=dict(os.environ))
