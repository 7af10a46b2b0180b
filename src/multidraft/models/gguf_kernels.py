"""The quantized runner's CPU kernels (kernels/gguf_kernels.cpp): linears over GGUF blocks and attention, both
batch-invariant, built once with the system's C++ compiler like the fast runner's kernel (fast_linear.py).

Ops (torch.ops.multidraft_gguf):
- linear(x (..., K) fp32, blocks (N, row_bytes) uint8, type, K) -> (..., N): x @ W^T with W the blocks' values;
- linear_q8(x, blocks, type, K): the same with x quantized per row to int8, per 256 values for Q2_K / Q4_K / Q5_K /
  Q6_K / IQ2_XXS / IQ2_XS / IQ2_S / IQ3_XXS / IQ4_XS and per 32 for Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / IQ4_NL
  (llama.cpp's arithmetic), on the instruction-set path chosen at load (`isa()`; kernels/q8_linear.inc);
- linear_q8_many(x, [blocks], [type], K, [bias or None]): several linear_q8 on one input quantized once, + biases;
- dequantize(blocks, type, K, ids) -> (len(ids), K) fp32: chosen rows of W (embedding lookups, prefill GEMM);
- attention(q (H, T, D), k (KVH, S, D), v, visible (T, S) bool, scaling) -> (T, H, D), each KV head's keys read
  once for all its query heads;
- add_rms_norm(x, branch or None, weight, eps) -> (x + branch, its RMSNorm), rotary_heads(q, k, cos, signed_sin),
  rotary_store (the same, keys and values written into a cache layer's buffers) and silu_mul(gate, up): the native
  forward's elementwise steps, torch's fp32 operations bit for bit (kernels/layer_ops.inc);
- all_finite(x) -> bool: no NaN or infinity in x, in one pass.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import sys
import threading
import warnings
import weakref
from importlib import resources
from typing import Optional

import torch

from multidraft.models import fast_linear, gguf_convert, kernel_build

# GGUF tensor types the kernel reads as they are (ggml's numbering); Q3_K and IQ3_S become Q6_K at load
# (gguf_convert.py); others are expanded to F32.
NATIVE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 12: "Q4_K",
                13: "Q5_K", 14: "Q6_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 20: "IQ4_NL", 22: "IQ2_S",
                23: "IQ4_XS", 30: "BF16"}

# Types with an 8-bit-activation kernel (runner "quantized-q8"): activations quantized per 256 values for the K
# formats and the IQ formats on them, per 32 for the others.
Q8_TYPES = {2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
            16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 20: "IQ4_NL", 22: "IQ2_S", 23: "IQ4_XS"}
# Each Q8 type's (values per block, bytes per block, offsets of its fp16 scale fields).
BLOCK_LAYOUTS = {2: (32, 18, (0,)), 3: (32, 20, (0, 2)), 6: (32, 22, (0,)), 7: (32, 24, (0, 2)), 8: (32, 34, (0,)),
                 10: (256, 84, (80, 82)), 12: (256, 144, (0, 2)), 13: (256, 176, (0, 2)), 14: (256, 210, (208,)),
                 16: (256, 66, (0,)), 17: (256, 74, (0,)), 18: (256, 98, (0,)), 20: (32, 18, (0,)),
                 22: (256, 82, (0,)), 23: (256, 136, (0,))}

# Q4_K repacked in groups of 8 rows for the 8-bit kernels (kernels/q8_x8.inc): our own type number, not GGUF's.
Q4_K_X8 = 112
# Q5_K repacked likewise, its fifth bits apart (kernels/q8_x8.inc): packed where `packs_q5_k()` (every vector path).
Q5_K_X8 = 113
# Q6_K repacked in groups of 16 rows for the AMX tile and AVX512-VNNI kernels (kernels/q6_x16.inc), or in groups of
# 8 rows for the 256-bit kernels (kernels/q6_x8.inc): each packed only where `q6_k_layout()` names it.
Q6_K_X16 = 114
Q6_K_X8 = 115
# IQ4_XS repacked in Q4_K_X8's layout (kernels/iq4_x8.inc, iq4_x8_256.inc): packed on every path.
IQ4_XS_X8 = 116
# Q2_K repacked in groups of 8 rows (kernels/q2_x8.inc, q2_x8_256.inc): packed on every path.
Q2_K_X8 = 117
# Q3_K (converted to Q6_K at load) in IQ4_XS_X8's layout with a scale per 16 values and no table (its indices are the
# values + 4; kernels/iq4_x8.inc): packed on every path, from the Q6_K blocks (repack_q6_k_q3_k_x8). IQ3_S's Q6_K
# blocks pack as IQ4_XS_X8 with a table of their own (repack_q6_k_iq3_s_x8).
Q3_K_X8 = 118
# The 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) repacked in groups of 16 rows for the AVX512-VNNI
# kernel (kernels/q32_x16.inc) and the 256-bit ones (q32_x16_256.inc): type 100 + GGUF's, packed where
# `packs_x16_32()`.
X16_32 = {plain: 100 + plain for plain in (2, 3, 6, 7, 8, 20)}
# Each packed type's GGUF type, its repack function (blocks -> packed blocks) and the row multiple it needs.
PACKED = {Q4_K_X8: (12, lambda blocks: repack_q4_k_x8(blocks), 8),
          Q5_K_X8: (13, lambda blocks: repack_q5_k_x8(blocks), 8),
          Q6_K_X16: (14, lambda blocks: repack_q6_k_x16(blocks), 16),
          Q6_K_X8: (14, lambda blocks: repack_q6_k_x8(blocks), 8),
          IQ4_XS_X8: (23, lambda blocks: repack_iq4_xs_x8(blocks), 8),
          Q2_K_X8: (10, lambda blocks: repack_q2_k_x8(blocks), 8),
          **{packed: (plain, lambda blocks, plain=plain: repack_x16_32(blocks, plain), 16)
             for plain, packed in X16_32.items()}}

_lock = threading.Lock()
_loaded = False
_failure: Optional[str] = None
_build_folder: Optional[str] = None


def source() -> str:
    """The kernels' C++ as one text: gguf_kernels.cpp with its local `#include "x.inc"` lines replaced by the files
    (the q8 row kernels are included once per instruction set), so the build cache's key covers every file."""
    folder = resources.files("multidraft.models").joinpath("kernels")

    def expand(name: str) -> str:
        if name == "iq_grids.inc":
            return _iq_grids()
        return re.sub(r'^#include "([\w.]+)"$', lambda m: expand(m.group(1)), folder.joinpath(name).read_text(),
                      flags=re.M)
    return expand("gguf_kernels.cpp")


def _iq_grids() -> str:
    """The C++ tables of the IQ formats' fixed grids (the codebooks llama.cpp defines), written into the kernels'
    source at build time from gguf-py's copies: IQ3_XXS's 256 and IQ3_S's 512 quadruples of bytes as little-endian
    uint32, IQ2_XXS's 256, IQ2_XS's 512 and IQ2_S's 1024 octets as uint64."""
    def table(quant_name: str) -> str:
        words = gguf_convert.grid_words(quant_name)
        digits = 2 * words.dtype.itemsize
        rows = [", ".join(f"0x{int(w):0{digits}x}u" for w in words[i:i + 8]) for i in range(0, len(words), 8)]
        c_type = "uint32_t" if words.dtype.itemsize == 4 else "uint64_t"
        return (f"alignas(64) constexpr {c_type} {quant_name}_GRID[{len(words)}] = {{\n    " + ",\n    ".join(rows)
                + "};\n")
    return table("IQ3_XXS") + table("IQ3_S") + table("IQ2_XXS") + table("IQ2_XS") + table("IQ2_S") + table("IQ1_S")


def unavailable_reason() -> Optional[str]:
    """Why the kernels cannot run here (None: they can, or have not been tried yet)."""
    return fast_linear.cpu_build_unavailable_reason() or _failure


def load(progress: bool = True) -> bool:
    """Build (once) and load the ops; False where they cannot run (`unavailable_reason()` says why)."""
    global _loaded, _failure
    with _lock:
        if _loaded:
            return True
        if unavailable_reason():
            return False
        text = source()
        global _build_folder
        _build_folder = kernel_build.cache_folder("gguf", text)
        if hasattr(torch.ops.multidraft_gguf, "linear"):
            _choose_isa()
            _loaded = True
            return True
        try:
            kernel_build.load_library("multidraft_gguf_kernels", text, _build_folder, "quantized CPU kernels",
                                      progress)
        except Exception as error:       # no compiler, no ninja, a build error: the caller falls back
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            _failure = f"the quantized CPU kernels could not be built ({first_line})"
            return False
        _choose_isa()
        _loaded = True
        return True


def linear(x: torch.Tensor, blocks: torch.Tensor, type_id: int, width: int) -> torch.Tensor:
    return torch.ops.multidraft_gguf.linear(x, blocks, type_id, width)


def linear_q8(x: torch.Tensor, blocks: torch.Tensor, type_id: int, width: int) -> torch.Tensor:
    return torch.ops.multidraft_gguf.linear_q8(x, blocks, type_id, width)


def linear_q8_many(x: torch.Tensor, blocks: list, type_ids: list, width: int, biases: list) -> list:
    """linear_q8 of several matrices on one input, quantized once per activation block (q8_block) they use (q, k, v;
    gate, up), each + its bias (or None): each output is the bits of its own linear_q8 call + bias."""
    return torch.ops.multidraft_gguf.linear_q8_many(x, blocks, type_ids, width, biases)


def linear_q8_many_on(x: torch.Tensor, blocks: list, type_ids: list, width: int, biases: list, path: str) -> list:
    return torch.ops.multidraft_gguf.linear_q8_many_on(x, blocks, type_ids, width, biases, _PATH_NUMBERS[path])


def q8_block(type_id: int) -> int:
    """How many activation values share one int8 scale for a Q8_TYPES format: 256 (K formats) or 32."""
    return BLOCK_LAYOUTS[type_id][0]


def linear_q8_on(x: torch.Tensor, blocks: torch.Tensor, type_id: int, width: int, path: str) -> torch.Tensor:
    """linear_q8 on a named path (ISA_PATHS or TEST_PATHS), whatever path `isa()` is: for tests and self-checks."""
    return torch.ops.multidraft_gguf.linear_q8_on(x, blocks, type_id, width, _PATH_NUMBERS[path])


# ---------------------------------------------------------------- the instruction-set path of linear_q8

# The paths MULTIDRAFT_ISA can force, best first after the scalar reference (numbers: q8_linear.inc's Q8Path).
ISA_PATHS = ("scalar", "avx2", "avx-vnni", "avx512-vnni", "amx")
# Test paths: on any machine, the VNNI template with vpdpbusd emulated in AVX2 and the AMX kernel with its tile ops,
# decoding and epilogue in scalar C++; on an AVX512-VBMI CPU without AMX (Zen 4 and 5, Ice Lake), the amx path with
# its tile ops alone emulated (its own AVX512-VBMI decoding, AVX-512 epilogue and VNNI kernels around them).
TEST_PATHS = ("vnni-emulated", "amx-emulated", "amx-emulated-tiles")
_PATH_NUMBERS = {"scalar": 0, "avx2": 1, "avx-vnni": 2, "avx512-vnni": 3, "amx": 4, "vnni-emulated": 5,
                 "amx-emulated": 6, "amx-emulated-tiles": 7}
_isa = "avx2"


def missing_flag(path: str) -> str:
    """The cpuid flag `path` needs that this CPU lacks ("" when it can run here); needs `load()`."""
    return torch.ops.multidraft_gguf.q8_missing(_PATH_NUMBERS[path])


def isa() -> str:
    """The path linear_q8 runs on in this process (after `load()`)."""
    return _isa


def q6_k_layout() -> int:
    """The layout this process's path runs Q6_K fastest in: Q6_K_X16 on amx and on avx512-vnni with AVX512-VBMI (its
    decoding), Q6_K_X8 on avx2, avx-vnni and avx512-vnni without VBMI, else 14 (GGUF's)."""
    return int(torch.ops.multidraft_gguf.q8_q6_k_layout(_PATH_NUMBERS[_isa]))


def packs_q5_k() -> bool:
    """Whether this process's path runs Q5_K faster packed in eights (Q5_K_X8): every vector path (our AVX-512
    kernels, AVX2's on the 256-bit paths); the scalar reference reads GGUF's layout."""
    return bool(torch.ops.multidraft_gguf.q8_packs_q5_k(_PATH_NUMBERS[_isa]))


def packs_x16_32() -> bool:
    """Whether this process's path runs the 32-value formats faster packed in sixteens (X16_32): every vector path
    (the AVX-512 kernels and the tiles, the 256-bit ones); the scalar reference reads GGUF's layout."""
    return bool(torch.ops.multidraft_gguf.q8_packs_x16_32(_PATH_NUMBERS[_isa]))


def _choose_isa() -> None:
    if os.environ.get(_PROBE_ENV):          # the probe child: it runs self_check on the paths it is told
        return
    use_isa(os.environ.get("MULTIDRAFT_ISA", "").strip().lower() or None, "MULTIDRAFT_ISA=")


def use_isa(path: Optional[str] = None, label: str = "") -> str:
    """Put linear_q8 on `path` (None: the best one this CPU has) in this process; returns the path in use. Each
    candidate is checked once bit for bit against the scalar reference (self_check); one that fails warns and
    hands over to the next one down, so no untested instruction can change an answer (the verdict is kept for the
    process: self_check)."""
    global _isa
    from multidraft.errors import InvalidOptionError
    if path is not None:
        if path not in ISA_PATHS:
            raise InvalidOptionError(f"{label}{path!r} is not a path; use one of {', '.join(ISA_PATHS)}")
        if missing_flag(path):
            raise InvalidOptionError(f"{label}{path} needs the CPU flag {missing_flag(path)}, which this CPU lacks; "
                                     "choose a lower path (avx2 runs on every supported CPU)")
        candidates = list(reversed(ISA_PATHS[:ISA_PATHS.index(path) + 1]))
    else:
        candidates = [p for p in reversed(ISA_PATHS) if not missing_flag(p)]
    crashed = crashing_paths()
    for candidate in [p for p in candidates if p in crashed]:
        warnings.warn(f"multidraft: the {candidate} path of the 8-bit kernels crashed its self-check in a child "
                      f"process ({crashed[candidate]}); using a lower path", RuntimeWarning, stacklevel=3)
    candidates = [p for p in candidates if p not in crashed]
    for candidate in candidates:
        if candidate == "scalar" or self_check(candidate):
            break
        warnings.warn(f"multidraft: the {candidate} path of the 8-bit kernels gave other bits than the scalar "
                      "reference in its self-check; using a lower path", RuntimeWarning, stacklevel=3)
    torch.ops.multidraft_gguf.set_q8_path(_PATH_NUMBERS[candidate])
    _isa = candidate
    return candidate


# ---------------------------------------------------------------- a path that crashes costs itself, not the process

_PROBE_ENV = "MULTIDRAFT_ISA_PROBE"
_crashed: Optional[dict] = None


def _cpu_key() -> str:
    """This CPU's model and flags (a VM moved to another host may have others), hashed."""
    try:
        with open("/proc/cpuinfo") as handle:
            lines = [line for line in handle.read().splitlines() if line.startswith(("model name", "flags"))][:2]
    except OSError:
        lines = []
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def crashing_paths() -> dict:
    """{path: why} for the paths whose self-check kills a process here (an illegal instruction, a hang). Learnt once
    per kernel build and CPU in a child process that runs self_check on each path this CPU claims, so an instruction
    the CPU advertises but cannot run (a hypervisor, a compiler bug) costs that path, never the caller; kept in a
    file beside the build."""
    global _crashed
    if _crashed is not None:
        return _crashed
    import json
    claimed = [p for p in ISA_PATHS if p != "scalar" and not missing_flag(p)]
    record = os.path.join(_build_folder, f"paths-{_cpu_key()}.json") if _build_folder else None
    if record and os.path.exists(record):
        try:
            with open(record) as handle:
                _crashed = {p: why for p, why in json.load(handle).items() if p in ISA_PATHS}
            return _crashed
        except (OSError, ValueError):
            pass                             # unreadable: probe again
    crashed, todo = {}, claimed
    while todo:
        out, why, finished = _probe(todo)
        done = [line.split()[1] for line in out.splitlines() if line.startswith("done ")]
        started = [line.split()[1] for line in out.splitlines() if line.startswith("start ")]
        todo = [p for p in todo if p not in done]
        if finished or not todo:
            break
        if not started or started[-1] in done:       # died before a path ran: the probe itself failed
            warnings.warn(f"multidraft: the 8-bit kernels' path probe failed ({why}); trusting the CPU's flags",
                          RuntimeWarning, stacklevel=2)
            _crashed = crashed
            return _crashed                          # not recorded: the next process probes again
        crashed[started[-1]] = why
        todo = [p for p in todo if p != started[-1]]
    _crashed = crashed
    if record:
        temporary = f"{record}.{os.getpid()}.tmp"
        try:
            with open(temporary, "w") as handle:
                json.dump(crashed, handle)
            os.replace(temporary, record)
        except OSError:                              # a read-only build folder: probe again next time
            pass
    return _crashed


def _probe(paths: list) -> tuple:
    """A child process runs self_check on `paths` in turn: (its output, why it stopped, whether it finished)."""
    import subprocess
    env = dict(os.environ, **{_PROBE_ENV: "1"}, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("MULTIDRAFT_ISA", None)
    # MULTIDRAFT_ISA_PROBE_CRASH names a path whose check the child kills itself in: the tests' stand-in for an
    # instruction that traps
    code = ("import os, signal, sys\nfrom multidraft.models import gguf_kernels as g\ng.load(progress=False)\n"
            "for p in sys.argv[1:]:\n    print('start', p, flush=True)\n"
            "    if os.environ.get('MULTIDRAFT_ISA_PROBE_CRASH') == p: os.kill(os.getpid(), signal.SIGILL)\n"
            "    g.self_check(p)\n    print('done', p, flush=True)\n")
    try:
        child = subprocess.run([sys.executable, "-c", code, *paths], env=env, capture_output=True, text=True,
                               timeout=600)
    except subprocess.TimeoutExpired as error:
        out = error.stdout.decode() if isinstance(error.stdout, bytes) else (error.stdout or "")
        return out, "no answer in 600 s", False
    why = f"signal {-child.returncode}" if child.returncode < 0 else f"exit status {child.returncode}"
    return child.stdout, why, child.returncode == 0


def random_blocks(type_id: int, rows: int, width: int, generator: torch.Generator) -> torch.Tensor:
    """Random blocks of a Q8_TYPES format with finite, moderate fp16 scales (every other byte random): test data."""
    values, size, scale_offsets = BLOCK_LAYOUTS[type_id]
    superblocks = width // values
    blocks = torch.randint(0, 256, (rows, superblocks, size), generator=generator, dtype=torch.uint8)
    for offset in scale_offsets:
        scales = (torch.rand(rows, superblocks, generator=generator) * 0.05 + 0.001).to(torch.float16)
        blocks[:, :, offset:offset + 2] = scales.view(torch.uint8).view(rows, superblocks, 2)
    return blocks.reshape(rows, superblocks * size).contiguous()


def repack_q4_k_x8(blocks: torch.Tensor) -> torch.Tensor:
    """Q4_K blocks (rows a multiple of 8) in the Q4_K_X8 layout that linear_q8 reads faster, with the same bits."""
    return torch.ops.multidraft_gguf.repack_q4_k_x8(blocks)


def repack_q5_k_x8(blocks: torch.Tensor) -> torch.Tensor:
    """Q5_K blocks (rows a multiple of 8) in the Q5_K_X8 layout of the vector kernels (AVX-512's, AVX2's on the
    256-bit paths), with the same bits (the scalar path reads it exactly but slowly: pack it only where
    `packs_q5_k()`)."""
    return torch.ops.multidraft_gguf.repack_q5_k_x8(blocks)


def repack_iq4_xs_x8(blocks: torch.Tensor) -> torch.Tensor:
    """IQ4_XS blocks (rows a multiple of 8) in the IQ4_XS_X8 layout that linear_q8 reads faster, with the same bits."""
    return torch.ops.multidraft_gguf.repack_iq4_xs_x8(blocks)


def repack_q6_k_iq3_s_x8(blocks: torch.Tensor) -> torch.Tensor:
    """Q6_K blocks converted from IQ3_S (gguf_convert.iq3_s_as_q6_k; rows a multiple of 8) in the IQ4_XS_X8 layout with
    IQ3_S's table of odd values: the same bits at 148 bytes a super-block for Q6_K's 210 (an error for Q6_K blocks
    that are not an IQ3_S's values)."""
    return torch.ops.multidraft_gguf.repack_q6_k_iq3_s_x8(blocks)


def repack_q6_k_q3_k_x8(blocks: torch.Tensor) -> torch.Tensor:
    """Q6_K blocks converted from Q3_K (gguf_convert.q3_k_as_q6_k; rows a multiple of 8) in the Q3_K_X8 layout: the
    same bits at 164 bytes a super-block for Q6_K's 210 (an error for Q6_K blocks that are not a Q3_K's values)."""
    return torch.ops.multidraft_gguf.repack_q6_k_q3_k_x8(blocks)


def is_loaded() -> bool:
    """Whether the ops are loaded in this process (without building or loading them)."""
    return _loaded


def as_q6_k(blocks: torch.Tensor, type_id: int) -> torch.Tensor:
    """(rows, row bytes) uint8 of Q3_K (type 11), IQ3_S (21), IQ1_S (19), IQ1_M (29), TQ1_0 (34) or TQ2_0 (35) blocks
    -> the Q6_K blocks of the same values: the bytes of gguf_convert's numpy re-encodings (the reference), made in
    C++ on the OpenMP threads."""
    return torch.ops.multidraft_gguf.convert_as_q6_k(blocks, type_id)


# The formats converted to Q6_K at load that pack in layouts of their own (GGUF type -> (packed type, its repack of the
# Q6_K blocks)), rows in eights: IQ3_S in IQ4_XS_X8's layout with its table, Q3_K in Q3_K_X8.
CONVERTED_PACKS = {21: (IQ4_XS_X8, repack_q6_k_iq3_s_x8), 11: (Q3_K_X8, repack_q6_k_q3_k_x8)}
# Formats whose Q6_K blocks fit one of those layouts too (GGUF type -> the type whose layout): IQ1_S's (odd values -9..9
# and a scale 2 s + 1 per 32 values) IQ3_S's, TQ1_0's and TQ2_0's (values -1..1, every scale 1) Q3_K's. IQ1_M's
# scales are per 16 values and its values reach +-9: it packs as Q6_K.
PACKS_AS = {19: 21, 34: 11, 35: 11}


def random_converted_blocks(type_id: int, rows: int, width: int, generator: torch.Generator) -> torch.Tensor:
    """Random blocks of a format converted at load (11: Q3_K, 21: IQ3_S; a moderate fp16 d, every other byte random)
    as the Q6_K blocks they convert to: test data for repack_q6_k_q3_k_x8 and repack_q6_k_iq3_s_x8."""
    size, d_at, convert = ((gguf_convert.Q3_K_BYTES, 108, gguf_convert.q3_k_as_q6_k) if type_id == 11
                           else (gguf_convert.IQ3_S_BYTES, 0, gguf_convert.iq3_s_as_q6_k))
    blocks = torch.randint(0, 256, (rows, width // 256, size), generator=generator, dtype=torch.uint8)
    d = (torch.rand(rows, width // 256, generator=generator) * 0.05 + 0.001).to(torch.float16)
    blocks[:, :, d_at:d_at + 2] = d.view(torch.uint8).view(rows, width // 256, 2)
    return torch.from_numpy(convert(blocks.reshape(rows, -1).numpy()))


def repack_q2_k_x8(blocks: torch.Tensor) -> torch.Tensor:
    """Q2_K blocks (rows a multiple of 8) in the Q2_K_X8 layout that linear_q8 reads faster, with the same bits."""
    return torch.ops.multidraft_gguf.repack_q2_k_x8(blocks)


def repack_q6_k_x16(blocks: torch.Tensor) -> torch.Tensor:
    """Q6_K blocks (rows a multiple of 16) in the Q6_K_X16 layout of the AMX tile and AVX512-VNNI kernels, with the
    same bits (on other paths linear_q8 computes it exactly but slowly: pack it only where `q6_k_layout()` says)."""
    return torch.ops.multidraft_gguf.repack_q6_k_x16(blocks)


def repack_q6_k_x8(blocks: torch.Tensor) -> torch.Tensor:
    """Q6_K blocks (rows a multiple of 8) in the Q6_K_X8 layout of the 256-bit kernels, with the same bits (read by
    every path; packed where `q6_k_layout()` says)."""
    return torch.ops.multidraft_gguf.repack_q6_k_x8(blocks)


def repack_x16_32(blocks: torch.Tensor, type_id: int) -> torch.Tensor:
    """Blocks of a 32-value format (rows a multiple of 16) in its X16_32 layout (type X16_32[type_id]), with the same
    bits (the scalar path reads it exactly but slowly: pack it only where `packs_x16_32()`)."""
    return torch.ops.multidraft_gguf.repack_x16_32(blocks, type_id)


def repack(blocks: torch.Tensor, packed_type: int) -> torch.Tensor:
    """GGUF blocks of PACKED[packed_type][0] in the layout `packed_type`."""
    return PACKED[packed_type][1](blocks)


def checked_layouts() -> list:
    """(type, plain type, random blocks (rows, width, generator), repack or None) for every layout the 8-bit kernels
    read: each Q8 type as it is, each packed layout, and IQ3_S and Q3_K (as Q6_K) in IQ4_XS_X8's layout and Q3_K_X8."""
    plain = [(t, t, lambda rows, width, g, t=t: random_blocks(t, rows, width, g), None) for t in Q8_TYPES]
    packed = [(t, PACKED[t][0], lambda rows, width, g, t=t: random_blocks(PACKED[t][0], rows, width, g),
               lambda blocks, t=t: repack(blocks, t)) for t in PACKED]
    converted = [(t, 14, lambda rows, width, g, source=source: random_converted_blocks(source, rows, width, g), pack)
                 for source, (t, pack) in CONVERTED_PACKS.items()]
    return plain + packed + converted


@functools.lru_cache(maxsize=None)
def self_check(path: str, max_rows: int = 40) -> bool:
    """True when `path` gives the scalar reference's bits on random blocks of every Q8 type (and the packed
    layouts), 1..max_rows rows. Once per process and path: a path's bits do not change while it runs, and
    `multidraft bench forward-cost --isa` switches paths twice a round (16-40 ms a check on a Zen 5)."""
    generator = torch.Generator().manual_seed(1234)
    width = 512
    for type_id, plain, make, pack in checked_layouts():
        blocks = make(48 if pack else 37, width, generator)
        x = torch.randn(max_rows, width, generator=generator)
        expected = linear_q8_on(x, blocks, plain, width, "scalar").view(torch.int32)   # each row on its own
        if pack:
            blocks = pack(blocks)
        for rows in range(1, max_rows + 1):
            got = linear_q8_on(x[max_rows - rows:], blocks, type_id, width, path)
            if not torch.equal(got.view(torch.int32), expected[max_rows - rows:]):
                return False
    return True


def dequantize(blocks: torch.Tensor, type_id: int, width: int, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
    if rows is None:
        rows = torch.arange(blocks.shape[0])
    return torch.ops.multidraft_gguf.dequantize(blocks, type_id, width, rows)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scaling: float) -> torch.Tensor:
    return torch.ops.multidraft_gguf.attention(q, k, v, visible, float(scaling))


def set_attention_wide(on: bool) -> bool:
    """Put the attention on its AVX-512 two-heads-at-once loops (on) or one head at a time (the same bits either way;
    use_isa turns it on with the avx512-vnni and amx paths); returns the previous setting. For tests."""
    return bool(torch.ops.multidraft_gguf.set_attention_wide(on))


def set_amx_vnni_rows(q4_k: int, q6_k: int, q32: Optional[int] = None, q2_k: Optional[int] = None) -> tuple:
    """Up to how many input rows the amx path runs Q4_K_X8 (and Q5_K_X8, IQ4_XS_X8, Q3_K_X8) / Q6_K_X16 / the
    32-value formats in sixteens (q32) / Q2_K_X8 (q2_k; None: q4_k's, for either) on its AVX512-VNNI kernels instead
    of the tile kernels (0: tiles at every row count); returns the previous four limits (q4_k, q6_k, q32, q2_k). The
    same bits either way: for tests and for timing the crossover on an AMX CPU."""
    q32 = q4_k if q32 is None else q32
    q2_k = q4_k if q2_k is None else q2_k
    return tuple(int(v) for v in torch.ops.multidraft_gguf.set_amx_vnni_rows(int(q4_k), int(q6_k), int(q32),
                                                                             int(q2_k)))


def set_amx_pipelined(on: bool) -> bool:
    """Whether the amx path's tile kernels issue each unit's tile products before the previous unit's epilogue (on,
    the default) or run each epilogue right after its products; returns the previous setting. The same bits either
    way: for tests and for timing both orders on an AMX CPU."""
    return bool(torch.ops.multidraft_gguf.set_amx_pipelined(bool(on)))


def set_nontemporal_weights(on: bool) -> bool:
    """Whether the VNNI kernels prefetch a one-pass call's weights non-temporally (on: chosen at load on AMD's Zen 5
    and later, whose L3 takes L2's victims; off: into L2, as on Zen 4 and Intel's CPUs). The same bits either way;
    returns the previous setting. For tests and A/B timings."""
    return bool(torch.ops.multidraft_gguf.set_nontemporal_weights(on))


def set_one_row_prefetch(on: bool) -> bool:
    """Whether the VNNI kernel of Q4_K packed in eights also prefetches a one-row call's weights in software (off:
    chosen at load on AMD's Zen 4, whose hardware prefetcher alone streamed them faster; on elsewhere; Q5_K's always
    are). The same bits either way; returns the previous setting. For tests and A/B timings."""
    return bool(torch.ops.multidraft_gguf.set_one_row_prefetch(on))


def attention_with(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor, scaling: float,
                   chunk: int, parts: int) -> torch.Tensor:
    """attention with its schedule named (tests): keys per L1 chunk and jobs per KV head (0: the defaults)."""
    return torch.ops.multidraft_gguf.attention_with(q, k, v, visible, float(scaling), chunk, parts)


def add_rms_norm(x: torch.Tensor, branch: Optional[torch.Tensor], weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.multidraft_gguf.add_rms_norm(x, branch, weight, float(eps))


def rotary_heads(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                 signed_sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.multidraft_gguf.rotary_heads(q, k, cos, signed_sin)


def rotary_store(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor,
                 keys: torch.Tensor, values: torch.Tensor, start: int,
                 row_slots: Optional[torch.Tensor] = None) -> torch.Tensor:
    """rotary_heads' q; its k and v written into the (1, KVH, slots, D) buffers keys and values at [start, start + T),
    or row t at row_slots[t] when given (an arena's write_index)."""
    return torch.ops.multidraft_gguf.rotary_store(q, k, v, cos, signed_sin, keys, values, int(start), row_slots)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.ops.multidraft_gguf.silu_mul(gate, up)


def release_layer_scratch() -> None:
    """Free the buffers decoder_layer reuses on this thread for its MLP's gate, up and product (layer_ops.inc's
    LayerScratch): the native forward calls it at its end, so a long prompt's buffers do not stay held."""
    torch.ops.multidraft_gguf.release_layer_scratch()


def set_layer_scratch(on: bool) -> bool:
    """Whether decoder_layer reuses those buffers (default on; off: fresh tensors per layer, the same bits; for A/B
    timings) -> the setting before."""
    return bool(torch.ops.multidraft_gguf.set_layer_scratch(bool(on)))


def layer_scratch_bytes() -> int:
    """The bytes of those buffers this thread holds (0 after a native forward)."""
    return int(torch.ops.multidraft_gguf.layer_scratch_bytes())


def decoder_layer(x: torch.Tensor, h: torch.Tensor, blocks: list, types: list, biases: list, norms: list, eps: list,
                  cos: torch.Tensor, signed_sin: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int,
                  visible: torch.Tensor, scaling: float,
                  row_slots: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One native decoder layer in one op (native.py): (x, h for the next layer, the rotated queries (H, T, D));
    start / row_slots: where the rows' keys and values go (rotary_store); six norms: Gemma3's layer."""
    return torch.ops.multidraft_gguf.decoder_layer(x, h, blocks, types, biases, norms, [float(e) for e in eps], cos,
                                                   signed_sin, keys, values, int(start), visible, float(scaling),
                                                   row_slots)


def decoder_stack(x: torch.Tensor, h: torch.Tensor, blocks: list, types: list, biases: list, norms: list, eps: list,
                  cos: list, signed_sin: list, keys: list, values: list, start: int, visible: list, kinds: list,
                  scaling: float, row_slots: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Every native decoder layer in one op (decoder_layer's arguments per layer, concatenated; keys / values: one
    cache buffer per layer; cos / signed_sin / visible: one per kind of layer, kinds: each layer's): (x, h after the
    last layer)."""
    return torch.ops.multidraft_gguf.decoder_stack(x, h, blocks, types, biases, norms, [float(e) for e in eps], cos,
                                                   signed_sin, keys, values, int(start), visible, kinds,
                                                   float(scaling), row_slots)


class RegisteredStack:
    """A model's decoder layers' weights, handed to the kernels once (decoder_stack's blocks, types, biases, norms,
    eps and kinds): a forward then passes their number instead of converting ~400 weights into the op's lists on
    every call. Released when this object goes."""

    def __init__(self, blocks: list, types: list, biases: list, norms: list, eps: list, kinds: list):
        self.handle = int(torch.ops.multidraft_gguf.register_stack(blocks, types, biases, norms,
                                                                   [float(e) for e in eps], kinds))
        self._release = weakref.finalize(self, torch.ops.multidraft_gguf.release_stack, self.handle)


def registered_stack(x: torch.Tensor, h: torch.Tensor, stack: RegisteredStack, cos: list, signed_sin: list,
                     keys: list, values: list, start: int, visible: list, scaling: float,
                     row_slots: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """decoder_stack over a registered stack's weights: the same op, the same bits."""
    return torch.ops.multidraft_gguf.registered_stack(stack.handle, x, h, cos, signed_sin, keys, values, int(start),
                                                      visible, float(scaling), row_slots)


def torch_sum_lanes() -> int:
    """The lanes of torch's fp32 sum kernel on this CPU, whose order the norms write out (0: unknown, torch's sum is
    called)."""
    return int(torch.ops.multidraft_gguf.torch_sum_lanes())


def set_torch_sum_written(on: bool) -> bool:
    """Whether the norms sum in torch's order themselves (on, the default) or call torch's sum: the same bits; the
    previous setting. For tests."""
    return bool(torch.ops.multidraft_gguf.set_torch_sum_written(bool(on)))


STAGES = ("linears", "attention", "layer steps")


def stage_times(on: bool) -> dict:
    """Switch the kernel ops' own timing on or off; the nanoseconds each stage spent since the previous call: the
    linears, the attention, the layers' elementwise steps (norms, rotary, the gated activation)."""
    return dict(zip(STAGES, (int(ns) for ns in torch.ops.multidraft_gguf.stage_times(bool(on)))))


def all_finite(x: torch.Tensor) -> bool:
    return torch.ops.multidraft_gguf.all_finite(x)
