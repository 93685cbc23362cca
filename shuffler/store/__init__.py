"""The shuffler's persistence."""

from .sqlite import Batch, ShufflerStore, split

__all__ = ["Batch", "ShufflerStore", "split"]
