"""A GGUF file's tensors as the quantized runner uses them: weight matrices as their blocks, small tensors as fp32.

`BlockMatrix` is one weight matrix kept in its GGUF encoding (rows of blocks along the input dimension), mapped
from the file, not copied: the linear kernel decodes it on the fly (gguf_kernels.py). Q3_K and IQ3_S blocks become
the Q6_K blocks of the same values at load (gguf_convert.py); block types the kernel does not
read are expanded to F32 once at load with gguf-py (and the load says what that costs), so any GGUF that gguf-py
reads works. IQ1_S, IQ1_M, TQ1_0 and TQ2_0 become Q6_K blocks too (an IQ1 matrix only where every block's d / 8 is
an fp16; gguf_convert.iq1_d_exact).
Names: HF parameter names are mapped to GGUF names with gguf-py's own table (the one llama.cpp's converter uses);
a GGUF of architecture HF_NAMES (an HF folder's Q8_0 blocks, hf_q8_0.py) holds them under the HF names themselves.
"""

from __future__ import annotations

import mmap
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from multidraft.errors import CorruptCacheError
from multidraft.models import gguf_convert, gguf_kernels

F32 = 0
# general.architecture of a GGUF whose tensors carry HF's own parameter names (hf_q8_0.py writes them)
HF_NAMES = "multidraft-hf-names"


def _as_q6_k(type_id: int, reference: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """A format's re-encoding as Q6_K: the kernels' once they are loaded (the same bytes; on a Zen 4 Q3_K's 28x and
    IQ3_S's 6.6x numpy's speed; an IQ1_S 1.5B's load 7.8 -> 3.8 s), else numpy's."""
    def convert(rows: np.ndarray) -> np.ndarray:
        if not gguf_kernels.is_loaded():
            return reference(rows)
        return gguf_kernels.as_q6_k(mapped_tensor(np.ascontiguousarray(rows)), type_id).numpy()
    return convert


# ggml's type number -> (its lossless re-encoding, the type it becomes): Q3_K, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0 -> Q6_K
CONVERSIONS = {type_id: (_as_q6_k(type_id, reference), 14) for type_id, reference in (
    (11, gguf_convert.q3_k_as_q6_k), (21, gguf_convert.iq3_s_as_q6_k), (19, gguf_convert.iq1_s_as_q6_k),
    (29, gguf_convert.iq1_m_as_q6_k), (34, gguf_convert.tq1_0_as_q6_k), (35, gguf_convert.tq2_0_as_q6_k))}
# a conversion that holds only where the blocks allow it (IQ1's d / 8 an fp16): elsewhere the matrix is expanded
CONVERTIBLE = {19: lambda rows: gguf_convert.iq1_d_exact(rows, 19), 29: lambda rows: gguf_convert.iq1_d_exact(rows, 29)}


@dataclass
class BlockMatrix:
    """A (rows x width) weight matrix as GGUF blocks: `blocks` is (rows, bytes per row) uint8."""

    blocks: torch.Tensor = field(repr=False, compare=False)    # read only when needed (a converted copy is made)
    type_id: int
    width: int
    name: str = ""
    # the layout the 8-bit kernels read fastest (gguf_kernels.PACKED: Q4_K_X8, Q6_K_X16, Q6_K_X8, X16_32, ...), made by
    # pack_for_q8
    packed: Optional[torch.Tensor] = field(default=None, repr=False)
    packed_type: Optional[int] = None
    # where `blocks` is a converted copy (gguf_convert), how to make it from the file: rebuild() all of it,
    # rebuild(rows) those rows. It is made only when read (a load converts one matrix at a time: the packed copy is
    # made, then drop_plain frees the converted one), and dequantize(rows) converts only those rows (embedding lookups)
    rebuild: Optional[Callable[..., torch.Tensor]] = field(default=None, repr=False)
    # the file's GGUF type where `blocks` is a converted copy (IQ3_S's and Q3_K's Q6_K blocks pack in layouts of their
    # own)
    source_type: Optional[int] = None

    @classmethod
    def made_when_read(cls, rows: int, type_id: int, width: int, name: str, rebuild: Callable[..., torch.Tensor],
                       source_type: Optional[int]) -> "BlockMatrix":
        """A converted matrix whose blocks `rebuild` makes on the first read of `blocks` (see `rebuild`)."""
        matrix = cls(torch.empty(0, dtype=torch.uint8), type_id, width, name, rebuild=rebuild, source_type=source_type)
        del matrix.blocks
        matrix._rows = rows
        return matrix

    def drop_plain(self) -> bool:
        """Free the plain blocks of a converted matrix that has a packed copy; False where there is nothing to free
        (not converted: its plain blocks are the file's pages, which GGUFWeights.release drops instead)."""
        if self.rebuild is None or self.packed is None or "blocks" not in self.__dict__:
            return False
        self._rows = self.rows
        del self.blocks
        return True

    def __getattr__(self, name: str):
        """Called only for an attribute not found: `blocks` after drop_plain, made again from the file."""
        if name == "blocks" and self.__dict__.get("rebuild") is not None:
            self.blocks = self.rebuild()
            return self.blocks
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def rows(self) -> int:
        blocks = self.__dict__.get("blocks")
        return int(blocks.shape[0]) if blocks is not None else self._rows

    @property
    def padded_rows(self) -> int:
        """Rows the packed copy holds past `rows`: copies of the last row that fill its last group (a vocabulary of
        32002 still packs in sixteens); the kernels compute them, linear() drops their outputs."""
        return int(self.packed.shape[0]) - self.rows if self.packed is not None else 0

    @property
    def type_name(self) -> str:
        return gguf_kernels.NATIVE_TYPES.get(self.type_id, str(self.type_id))

    @property
    def nbytes(self) -> int:
        return int(self.blocks.numel())

    @property
    def has_q8_kernel(self) -> bool:
        """Whether `linear(x, q8=True)` quantizes the activations (else it computes them in fp32)."""
        layout = gguf_kernels.BLOCK_LAYOUTS.get(self.type_id)
        return layout is not None and self.width % layout[0] == 0

    @property
    def shares_q8_kernel(self) -> bool:
        """Whether it can run in one 8-bit call with other matrices (linear_q8_many, the native decoder layer): its
        8-bit kernel, and no padding rows (that call takes each matrix's outputs whole)."""
        return self.has_q8_kernel and not self.padded_rows

    @property
    def q8_weights(self) -> tuple[torch.Tensor, int]:
        """(blocks, type) as the 8-bit kernels read them: the packed copy where there is one (the same bits)."""
        return (self.packed, self.packed_type) if self.packed is not None else (self.blocks, self.type_id)

    @property
    def streamed_bytes(self) -> int:
        """Bytes one 8-bit-activation linear reads (the packed copy's where there is one)."""
        return int(self.q8_weights[0].numel())

    def pack_for_q8(self) -> None:
        """Repack the matrix for the 8-bit kernels, once, where a packed layout is faster: Q4_K, IQ4_XS, Q2_K, and
        IQ3_S and Q3_K from their Q6_K blocks (IQ4_XS_X8's layout with their own tables; Q3_K_X8 with a scale per 16),
        rows in eights, on every path; Q6_K (in sixteens or eights: `q6_k_layout()`) on the amx, avx512-vnni,
        avx-vnni and avx2 paths; Q5_K (rows in eights) and the 32-value formats (IQ4_NL included; rows in sixteens) on
        every vector path; rows that do not fill the last group are filled with copies of the last row
        (`padded_rows`). A second copy of its blocks (the original stays mapped from the file for the fp32 path and
        row lookups; in q8 mode only the copy is read). Before 2026-12-06 such matrices stayed in GGUF's layout: a
        Q6_K head of 151934 rows on avx512-vnni (Zen 4, 2 threads) took 18.8 / 36.9 ms at 8 / 16 rows, packed 10.8 /
        20.9."""
        if self.packed is not None or not self.has_q8_kernel:
            return
        source = gguf_kernels.PACKS_AS.get(self.source_type, self.source_type)
        if source in gguf_kernels.CONVERTED_PACKS:      # IQ3_S and IQ1_S, Q3_K and TQ: 148 / 164 bytes for Q6_K's 210
            packed_type, repack = gguf_kernels.CONVERTED_PACKS[source]
            self._pack(packed_type, repack, 8)
            return
        if self.type_id == 12:
            packed_type = gguf_kernels.Q4_K_X8
        elif self.type_id == 13 and gguf_kernels.packs_q5_k():
            packed_type = gguf_kernels.Q5_K_X8
        elif self.type_id == 23:
            packed_type = gguf_kernels.IQ4_XS_X8
        elif self.type_id == 10:
            packed_type = gguf_kernels.Q2_K_X8
        elif self.type_id == 14 and (q6_layout := gguf_kernels.q6_k_layout()) != 14:
            packed_type = q6_layout
        elif self.type_id in gguf_kernels.X16_32 and gguf_kernels.packs_x16_32():
            packed_type = gguf_kernels.X16_32[self.type_id]
        else:
            return
        self._pack(packed_type, lambda blocks: gguf_kernels.repack(blocks, packed_type),
                   gguf_kernels.PACKED[packed_type][2])

    def _pack(self, packed_type: int, repack: Callable[[torch.Tensor], torch.Tensor], group: int) -> None:
        """The packed copy, its rows filled up to whole groups of `group` with copies of the last row (each output
        is its own row's: the real rows' bits do not depend on the others)."""
        blocks = self.blocks
        padding = -blocks.shape[0] % group
        if padding:
            blocks = torch.cat([blocks, blocks[-1:].expand(padding, -1)])
        self.packed_type, self.packed = packed_type, repack(blocks)

    def linear(self, x: torch.Tensor, q8: bool = False) -> torch.Tensor:
        if q8 and self.has_q8_kernel:
            out = gguf_kernels.linear_q8(x, *self.q8_weights, self.width)
            return out[..., :self.rows].contiguous() if self.padded_rows else out
        return gguf_kernels.linear(x, self.blocks, self.type_id, self.width)

    def dequantize(self, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        if rows is not None and "blocks" not in self.__dict__ and self.rebuild is not None:
            if rows.numel() and not 0 <= int(rows.min()) <= int(rows.max()) < self.rows:   # numpy would wrap -1
                raise IndexError(f"{self.name}: row indices must lie in 0..{self.rows - 1}")
            return gguf_kernels.dequantize(self.rebuild(rows), self.type_id, self.width)
        return gguf_kernels.dequantize(self.blocks, self.type_id, self.width, rows)

    def select_rows(self, order: torch.Tensor) -> "BlockMatrix":
        """The same matrix with its rows reordered (a copy of the reordered blocks; a converted matrix's made when
        read, as its own)."""
        if self.rebuild is not None:
            rebuild = self.rebuild
            return BlockMatrix.made_when_read(
                self.rows, self.type_id, self.width, self.name,
                lambda rows=None: rebuild(order if rows is None else order[rows]), self.source_type)
        return BlockMatrix(self.blocks.index_select(0, order).contiguous(), self.type_id, self.width, self.name,
                           source_type=self.source_type)


def mapped_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor on an array of the file's read-only mapping, without torch's warning (the kernels only read it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.1f} MB"


class GGUFWeights:
    """The tensors of one GGUF file, by GGUF name or by the HF parameter name they load into."""

    def __init__(self, path: Path, num_layers: int):
        import gguf

        from multidraft.models.gguf_header import TensorReader

        self.path = Path(path)
        try:
            self._reader = TensorReader(str(self.path), "r")
        except Exception as error:           # truncated or not a GGUF: say which file and how to repair
            raise CorruptCacheError(f"cannot read {self.path} as a GGUF file ({type(error).__name__}: "
                                    f"{str(error)[:200]}); pull or copy it again") from error
        self._tensors = {tensor.name: tensor for tensor in self._reader.tensors}
        field = self._reader.fields.get("general.architecture")
        self.architecture = bytes(field.parts[-1]).decode() if field is not None else ""
        self._reader.fields.clear()          # the runner reads only the architecture
        arch = {name: key for key, name in gguf.MODEL_ARCH_NAMES.items()}.get(self.architecture)
        self._names = gguf.get_tensor_name_map(arch, num_layers) if arch is not None else None
        self.expanded: dict[str, list[int]] = {}   # type name -> [matrices, bytes in the file, fp32 bytes]
        self.converted: dict[str, int] = {}        # type name -> matrices re-encoded losslessly (gguf_convert)

    def release(self, blocks: torch.Tensor) -> bool:
        """Drop this process's resident pages of `blocks` when they are this file's own mapping (a packed copy now
        serves the kernels): RSS stops counting them twice; a later read (the fp32 path, an embedding row) faults
        them back in from the file. Memory that is not the mapping (a reordered or dequantized copy) is left
        alone: False."""
        mapping = getattr(self._reader.data, "_mmap", None)
        if mapping is None or blocks.numel() == 0:
            return False
        start = blocks.data_ptr() - np.frombuffer(mapping, dtype=np.uint8).ctypes.data
        end = start + blocks.numel() * blocks.element_size()
        if start < 0 or end > len(mapping) or not blocks.is_contiguous():
            return False
        first, last = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE, end // mmap.PAGESIZE * mmap.PAGESIZE
        if last > first:                           # whole pages of this matrix only (the file is mapped read-only)
            mapping.madvise(mmap.MADV_DONTNEED, first, last - first)
        return True

    def gguf_name(self, hf_name: str) -> Optional[str]:
        """The GGUF tensor an HF parameter (`model.layers.0.self_attn.q_proj.weight`) comes from, if any."""
        if self.architecture == HF_NAMES:
            return hf_name if hf_name in self._tensors else None
        if self._names is None:
            return None
        name = self._names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        return name if name in self._tensors else None

    def matrix(self, gguf_name: str) -> BlockMatrix:
        import gguf

        tensor = self._tensors[gguf_name]
        type_id = int(tensor.tensor_type)
        width = int(tensor.shape[0])              # GGUF lists dimensions innermost first
        data = tensor.data
        if type_id in CONVERSIONS and CONVERTIBLE.get(type_id, lambda rows: True)(data):
            # the same values in a format the kernels compute (gguf_convert)
            convert, converted_type = CONVERSIONS[type_id]
            self.converted[tensor.tensor_type.name] = self.converted.get(tensor.tensor_type.name, 0) + 1

            def rebuild(rows: Optional[torch.Tensor] = None) -> torch.Tensor:
                if rows is not None:
                    return torch.from_numpy(convert(tensor.data[np.asarray(rows, dtype=np.int64)]))
                blocks = torch.from_numpy(convert(tensor.data))
                self.release(mapped_tensor(tensor.data))     # the file's pages: the converted copy replaces them
                return blocks
            return BlockMatrix.made_when_read(int(data.shape[0]), converted_type, width, gguf_name, rebuild, type_id)
        if type_id not in gguf_kernels.NATIVE_TYPES:
            values = gguf.quants.dequantize(data, tensor.tensor_type).astype(np.float32)
            tally = self.expanded.setdefault(tensor.tensor_type.name, [0, 0, 0])
            tally[0], tally[1], tally[2] = tally[0] + 1, tally[1] + int(data.nbytes), tally[2] + int(values.nbytes)
            data, type_id = values.reshape(-1, width).view(np.uint8), F32
        elif data.dtype != np.uint8:              # F32 / F16 / BF16 tensors come typed: the same bytes, as rows
            data = data.reshape(-1, width).view(np.uint8)
        return BlockMatrix(mapped_tensor(data), type_id, width, gguf_name)

    def expansion_warning(self) -> Optional[str]:
        """What the matrices of types without a kernel cost (None: there were none): they were expanded to fp32 at
        load, so they take 6-12x their file's memory and their linears run at fp32's pace."""
        if not self.expanded:
            return None
        count = sum(tally[0] for tally in self.expanded.values())
        names = ", ".join(f"{name} x {tally[0]}" for name, tally in sorted(self.expanded.items()))
        source = _size(sum(tally[1] for tally in self.expanded.values()))
        fp32 = _size(sum(tally[2] for tally in self.expanded.values()))
        return (f"multidraft: {count} tensors of {self.path.name} ({names}) are in formats the CPU kernels do not "
                f"read, so they were expanded to fp32 at load ({fp32} in place of {source}) and their "
                f"linears run several times slower than the rest; a GGUF of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, "
                f"Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, TQ1_0 or TQ2_0 "
                f"(Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, Q8_0, the IQ2 and IQ3 mixes, IQ4_XS) runs every matrix on the "
                f"8-bit kernels, and IQ1_S and IQ1_M where every block's scale divided by 8 is an fp16")

    def dense(self, gguf_name: str) -> torch.Tensor:
        """A small tensor (norm, bias) as fp32, in HF's shape order (outermost first)."""
        matrix = self.matrix(gguf_name)
        values = matrix.dequantize()
        shape = tuple(int(d) for d in reversed(self._tensors[gguf_name].shape))
        return values.reshape(shape)

    def type_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for tensor in self._tensors.values():
            counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
        return counts
