"""Drafters propose tokens; the verifier alone decides what is emitted, so a drafter never changes text."""

from .base import Drafter, NullDrafter, WindowContext

__all__ = ["Drafter", "NullDrafter", "WindowContext"]
