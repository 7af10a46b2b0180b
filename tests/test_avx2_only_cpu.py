"""An AVX2-only CPU (no AVX-512, VNNI or AMX: AMD Zen 3, Intel before Ice Lake) computes this CPU's bits.

The development machines rotate among AVX-512 CPUs, so the AVX2-only kind is emulated: QEMU's user mode
(`qemu-x86_64 -cpu max`, Debian's qemu-user) runs a child Python whose cpuid has AVX2 and no AVX-512, AVX-VNNI or AMX
(its TCG has none of them: such an instruction stops the child with SIGILL). There torch takes its AVX2 kernels and
the 8-bit kernels their avx2 path, after its self-check against the scalar reference (every layout, 1-40 rows). The
child's SmolLM2 logits (a prompt, single-token decodes, an 8-row verify) must be this process's bits, on whatever
path this CPU runs: what keeps a lossless method's tokens the same on both kinds of CPU.
`make test-avx2-cpu` runs the kernel and native-runner test files in such a child (for kernel changes). A CPU
without AVX2 at all cannot run the kernels: it loads the HF weights, and says so.
"""

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from multidraft.models import gguf_kernels
from tests import installed

QEMU = "qemu-x86_64"
PROMPT = "def quicksort(items):\n    \"\"\"Sort a list.\"\"\"\n"


def logits_digest(lm) -> str:
    """sha256 of the logits of the prompt's forward, 7 greedy decodes one row at a time, and the 8 tokens verified
    in one forward on a fresh cache."""
    ids = lm.tokenizer.encode(PROMPT)
    digest = hashlib.sha256()
    cache = lm.new_cache()
    out = lm.forward(cache, ids)
    digest.update(out.logits.float().numpy().tobytes())
    tokens = [int(out.logits[-1].argmax())]
    for _ in range(7):
        out = lm.forward(cache, [tokens[-1]])
        digest.update(out.logits.float().numpy().tobytes())
        tokens.append(int(out.logits[-1].argmax()))
    verify = lm.new_cache()
    lm.forward(verify, ids)
    digest.update(lm.forward(verify, tokens).logits.float().numpy().tobytes())
    return digest.hexdigest()


def child_main() -> None:
    """The emulated child: what it runs on, and its digest, as one JSON line."""
    from multidraft.models.loader import load_model
    torch.set_num_threads(2)
    lm = load_model("smollm2-135m", progress=False)
    print(json.dumps({"isa": gguf_kernels.isa(), "torch": str(torch.backends.cpu.get_cpu_capability()),
                      "runner": lm.runner, "avx512_missing": gguf_kernels.missing_flag("avx512-vnni"),
                      "digest": logits_digest(lm)}))


def test_an_emulated_avx2_only_cpu_gives_this_cpus_logits_bit_for_bit():
    if platform.machine() != "x86_64":
        pytest.skip("an x86-64 host runs the emulated x86-64 child")
    if shutil.which(QEMU) is None:
        installed.missing(f"{QEMU} (QEMU's user mode, Debian's qemu-user) is not installed", "qemu")
    installed.require_quantized_kernels()
    lm = installed.load_smollm()
    assert lm.runner == "native"
    expected = logits_digest(lm)
    env = {k: v for k, v in os.environ.items() if k not in ("MULTIDRAFT_ISA", "ATEN_CPU_CAPABILITY")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    root = Path(__file__).resolve().parent.parent
    child = subprocess.run([QEMU, "-cpu", "max", sys.executable, "-c",
                            "from tests.test_avx2_only_cpu import child_main; child_main()"],
                           env=env, cwd=root, capture_output=True, text=True, timeout=1200)
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-3000:]}"
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["avx512_missing"] == "avx512f" and report["torch"] == "AVX2", report    # the CPU it emulates
    assert report["isa"] == "avx2" and report["runner"] == "native", report     # the avx2 path passed its check
    assert "gave other bits" not in child.stderr, child.stderr[-3000:]
    assert report["digest"] == expected, (report, gguf_kernels.isa())


def test_a_cpu_without_avx2_says_so_and_runs_the_hf_weights():
    """The kernels need AVX2 (torch's capability says whether the CPU has it; ATEN_CPU_CAPABILITY=default is what a
    CPU without AVX2, an Atom-class Celeron say, reports): such a CPU loads the HF folder's weights with one warning
    that names why, and generates."""
    installed.load_smollm()                                   # pulled (or the missing() message)
    code = ("import warnings, multidraft\nwarnings.simplefilter('always')\n"
            "lm = multidraft.load_model('smollm2-135m', progress=False)\n"
            "print(lm.runner, len(multidraft.generate(lm, 'def add(a, b):', max_new_tokens=4).token_ids))\n")
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("MULTIDRAFT_ISA", None)
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.split() == ["eager", "4"], child.stdout
    assert child.stderr.count("this CPU has no AVX2 (torch reports DEFAULT); using the HF folder's weights") == 1, \
        child.stderr[-3000:]
