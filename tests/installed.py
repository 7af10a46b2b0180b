"""What `make test` installs must be there when `make test` runs: a test that needs it fails without it.

The Makefile's test targets (and so CI) set MULTIDRAFT_REQUIRE_INSTALLED=1 (CI=1 counts too): then a missing
SmolLM2 model or a kernel build that fails is a failure naming the make target that provides it. A plain `pytest`
run outside make (no models pulled yet, say) skips those tests with the same message instead.
"""

import os

import pytest


def required() -> bool:
    return os.environ.get("MULTIDRAFT_REQUIRE_INSTALLED") == "1" or bool(os.environ.get("CI"))


def missing(what: str, target: str) -> None:
    """Fail (under make test) or skip (plain pytest): `what` is missing, `make TARGET` provides it."""
    message = f"{what}; `make {target}` provides it"
    if required():
        pytest.fail(f"{message} (and `make test` runs it first, so it should be here)", pytrace=False)
    pytest.skip(message)


def load_smollm(**kwargs):
    """SmolLM2-135M loaded with `kwargs` (load_model's), or missing() when it is not pulled."""
    from multidraft.errors import ModelNotFoundError
    from multidraft.models.loader import load_model
    try:
        return load_model("smollm2-135m", **kwargs)
    except ModelNotFoundError as exc:
        missing(f"SmolLM2-135M is not pulled ({exc})", "models-data")


def require_quantized_kernels() -> None:
    """The GGUF-block kernels built and loaded; a CPU they cannot run on (no AVX2) is a skip, a failed build (no C++
    compiler) is missing()."""
    from multidraft.models import fast_linear, gguf_kernels
    if gguf_kernels.load(progress=False):
        return
    hardware = fast_linear.cpu_build_unavailable_reason()
    if hardware:
        pytest.skip(f"quantized kernels cannot run here: {hardware}")
    missing(f"the quantized kernels did not build ({gguf_kernels.unavailable_reason()}); they need a C++ compiler",
            "compiler")
