"""What the app lets one device spend: limits that no service can raise."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import BudgetExceeded


@dataclass(frozen=True)
class Budget:
    """The most ε (``total``) this device spends at one origin within any ``per_days`` days."""

    total: float = 8.0
    per_days: float = 30.0

    def __post_init__(self):
        for name in ("total", "per_days"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"Budget.{name} must be a positive finite number, got {value!r}")


@dataclass(frozen=True)
class Limits:
    """What the app lets one device spend: at most ``max_epsilon`` per collection, and ``budget``
    per origin. A service cannot raise either; the defaults hold for an app that never sets them."""

    max_epsilon: float = 2.0
    budget: Budget = Budget()

    def __post_init__(self):
        value = self.max_epsilon
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"max_epsilon must be a positive finite number, got {value!r}")
        if not isinstance(self.budget, Budget):
            raise ValueError(f"budget must be a Budget, got {self.budget!r}")

    def check_collection(self, epsilon: float, collection: str) -> None:
        """Raise :class:`BudgetExceeded` when a collection's ``epsilon`` is above :attr:`max_epsilon`."""
        if epsilon > self.max_epsilon:
            raise BudgetExceeded(
                f"collection {collection!r} asks epsilon={epsilon:g}; this app accepts at most "
                f"{self.max_epsilon:g} per collection; nothing was drawn or sent"
            )
