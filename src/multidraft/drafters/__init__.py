"""Drafters propose token trees on top of the committed sequence; see `Drafter`."""

from multidraft.drafters.base import Drafter
from multidraft.drafters.prompt_lookup import PromptLookupDrafter

__all__ = ["Drafter", "PromptLookupDrafter"]
