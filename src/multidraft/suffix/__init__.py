"""Suffix automata over token ids and the cross-request store behind `method="suffix"`."""

from multidraft.suffix.automaton import SuffixAutomaton
from multidraft.suffix.store import SuffixStore

__all__ = ["SuffixAutomaton", "SuffixStore"]
