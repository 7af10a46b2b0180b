"""The eager runner: HF's modeling code as it is (the reference every other runner is checked against)."""

from multidraft.models.runners.base import Runner


class EagerRunner(Runner):
    name = "eager"
