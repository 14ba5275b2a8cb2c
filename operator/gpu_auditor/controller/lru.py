"""A bounded, thread-safe map: what the operator remembers in memory is never unbounded."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class Lru:
    """Keys handled in this process, the least recently added dropped past `capacity`."""

    def __init__(self, capacity: int) -> None:
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def add(self, key: Any, value: object = True) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def get(self, key: Any) -> Any:
        with self._lock:
            return self._items.get(key)

    def pop(self, key: Any) -> Any:
        with self._lock:
            return self._items.pop(key, None)
