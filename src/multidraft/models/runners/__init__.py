"""The runners, one file each, and their registry: adding a runner is one file and one line below."""

from multidraft.models.runners.base import Capabilities, Runner
from multidraft.models.runners.eager import EagerRunner
from multidraft.models.runners.fast import FastRunner
from multidraft.models.runners.native import NativeRunner
from multidraft.models.runners.quantized import QuantizedRunner
from multidraft.models.runners.quantized_q8 import QuantizedQ8Runner
from multidraft.models.runners.static import StaticRunner

REGISTRY: dict[str, type[Runner]] = {runner.name: runner for runner in (
    EagerRunner,
    FastRunner,
    StaticRunner,
    QuantizedRunner,
    QuantizedQ8Runner,
    NativeRunner,
)}

__all__ = ["Capabilities", "Runner", "REGISTRY"]
