"""Locks and os.fork().

A child process has only the thread that called fork. A lock that another thread held at
that moment stays locked forever in the child, so its first compile (or cache lookup) would
hang. Two remedies, both registered with os.register_at_fork:

- `renew_in_child`: the child gets a new lock object, or a new table of per-key locks (for
  locks around short Python sections: the state they guard is consistent whenever the GIL
  is released in them);
- `hold_during_fork`: the forking thread takes the lock before fork and releases it after,
  so no other thread is inside the section at fork time (for LLVM, whose own state would
  be left half-updated in the child), and the child gets a new one.
"""
from __future__ import annotations

import os
import threading

_CAN_FORK = hasattr(os, "register_at_fork")


def renew_in_child(owner, name: str, factory=threading.Lock) -> None:
    """After a fork, `owner.<name>` is a new `factory()` in the child."""
    if _CAN_FORK:
        os.register_at_fork(after_in_child=lambda: setattr(owner, name, factory()))


def hold_during_fork(owner, name: str, factory=threading.Lock) -> None:
    """`owner.<name>` is held by the forking thread across fork, then released in the
    parent and replaced by a new `factory()` in the child."""
    if _CAN_FORK:
        os.register_at_fork(before=lambda: getattr(owner, name).acquire(),
                            after_in_parent=lambda: getattr(owner, name).release(),
                            after_in_child=lambda: setattr(owner, name, factory()))
