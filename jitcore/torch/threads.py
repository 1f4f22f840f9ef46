"""jitcore's intra-op pool and torch's next to each other.

A compiled model runs its parts one after the other on the calling thread: a jitcore part (its
pool busy, torch's idle) then a fallback op in torch (the reverse). The pools never work at the
same time, so sizing both to `jc.get_num_threads()` fills the cores without oversubscribing
them. Before a call of a model with fallback nodes, torch's intra-op count is set to jitcore's
(`jc.set_num_threads(n)` thus sets both for jitcore.torch models); a model without fallback
never touches torch's setting.
"""
from __future__ import annotations

import torch

import jitcore as jc


def match_torch_threads() -> None:
    n = jc.get_num_threads()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
