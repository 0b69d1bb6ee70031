"""dflash_tune's attention in SpecForge's DFlash drafter (and any transformers attention module that gets its mask
from SpecForge's ``create_dflash_block_mask``): the one-line change is

    import dflash_tune.specforge; dflash_tune.specforge.use()

before the training step runs. It makes SpecForge build a :class:`DFlashMask` (the anchors and block validity its
flex mask is made of, no mask materialised or compiled) where it built a flex ``BlockMask``, and routes transformers'
``"flex_attention"`` entry to :func:`attention_forward` for those masks (any other mask still goes to flex).
:func:`dflash_block_mask` and :func:`attention_forward` can be used directly: they take SpecForge's and
transformers' own arguments.
"""
from dataclasses import dataclass
from typing import Optional

import torch

from . import ops


_tune_missing = False  # use(tune_missing=...)


@dataclass
class DFlashMask:
    """The DFlash block mask of a batch, as the kernels take it: anchors [B, N] int32 (valid first, ascending),
    block_valid [B, N] bool, the context length S, the block size, and the sliding window (None: full)."""
    anchors: torch.Tensor
    block_valid: torch.Tensor
    ctx_len: int
    block_size: int
    sliding_window: Optional[int] = None


def dflash_block_mask(anchor_positions, block_keep_mask, S, block_size, device, sliding_window=None) -> DFlashMask:
    """SpecForge's ``create_dflash_block_mask`` arguments -> a DFlashMask (no mask is built)."""
    anchors = anchor_positions.to(device=device, dtype=torch.int32)
    valid = block_keep_mask.to(device=device, dtype=torch.bool)
    return DFlashMask(anchors, valid, int(S), int(block_size), sliding_window)


def attention_forward(module, query, key, value, attention_mask, scaling=None, sliding_window=None, dropout=0.0,
                      **kwargs):
    """transformers' attention-function signature over dflash_tune.ops.dflash_attention: query [B, Hq, Q, D], key
    and value [B, Hkv, S + Q, D], attention_mask a DFlashMask -> (output [B, Q, Hq, D], None)."""
    if not isinstance(attention_mask, DFlashMask):
        raise TypeError(f"dflash_tune.specforge.attention_forward needs a DFlashMask, got {type(attention_mask)}")
    if dropout:
        raise ValueError("dflash_tune: attention dropout is not supported (the drafter trains without it)")
    m = attention_mask
    o = ops.dflash_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), m.anchors,
                             m.block_valid, block_size=m.block_size, ctx_len=m.ctx_len,
                             sliding_window=m.sliding_window, scale=scaling, tune_missing=_tune_missing)
    return o, None


def use(tune_missing: bool = False) -> None:
    """Routes SpecForge's DFlash drafter attention to dflash_tune (see the module's doc); tune_missing=True tunes a
    key the cache lacks on first use instead of raising MissingKernelError."""
    from specforge.algorithms.common import dflash_family_model as sfm
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    flex = ALL_ATTENTION_FUNCTIONS["flex_attention"]

    def routed(module, query, key, value, attention_mask, *args, **kwargs):
        if isinstance(attention_mask, DFlashMask):
            return attention_forward(module, query, key, value, attention_mask, *args, **kwargs)
        return flex(module, query, key, value, attention_mask, *args, **kwargs)

    global _tune_missing
    _tune_missing = tune_missing
    ALL_ATTENTION_FUNCTIONS["flex_attention"] = routed
    sfm.create_dflash_block_mask = dflash_block_mask
