"""Verifiers: given the target's logits on a draft tree, accept a root-to-node path and pick the next token."""

from multidraft.verify.base import Verifier
from multidraft.verify.greedy import GreedyVerifier
from multidraft.verify.sample_match import SampleMatchVerifier

__all__ = ["Verifier", "GreedyVerifier", "SampleMatchVerifier"]
