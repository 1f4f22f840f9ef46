"""The bounded LRU behind jitcore's in-memory caches (compiled graphs, each jitted function's
signature plans, eager ops): at most JITCORE_CACHE_SIZE entries, least recently used out
first. Callers hold their own lock around each call."""
from __future__ import annotations

from collections import OrderedDict

from .. import config


class LRU(OrderedDict):
    def lookup(self, key):
        """The value for key (now the most recently used), or None."""
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        """Insert key, then drop the least recently used entries past the size."""
        self[key] = value
        while len(self) > config.get().cache_size:
            self.popitem(last=False)
