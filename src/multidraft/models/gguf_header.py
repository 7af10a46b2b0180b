"""Opening a GGUF file for its tensors without reading its metadata arrays.

gguf-py's reader turns every metadata value into numpy arrays, one per array element: the 1.5B's tokenizer
(151,936 tokens, 151,387 merges) became ~455,000 small arrays, 6.7 s of its ~14 s load here, only for the runner
to drop them (it reads the architecture and the tensors; the tokenizer comes from the HF folder). This reader walks
past metadata arrays by their lengths and keeps the scalar and string fields; the tensor table and the tensors'
mapped data are gguf-py's own.
"""

from __future__ import annotations

import struct
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType


class TensorReader(GGUFReader):
    """gguf.GGUFReader with the metadata arrays skipped (absent from `fields`); everything else as gguf-py has it."""

    def _build_fields(self, offs: int, count: int) -> int:
        if self.byte_order != "I" or sys.byteorder != "little":     # a byte-swapped file: gguf-py's own walk
            return super()._build_fields(offs, count)
        for _ in range(count):
            key_length, key = self._get_str(offs)
            value_offset = offs + 8 + int(key_length[0])
            raw_type = self._get(value_offset, np.uint32)
            if raw_type[0] != GGUFValueType.ARRAY:
                offs = self._push_scalar(offs, value_offset + 4, raw_type, key_length, key)
            else:
                offs = self._skip_array(value_offset + 4)
        return offs

    def _push_scalar(self, field_offset: int, offs: int, raw_type, key_length, key) -> int:
        """A scalar or string field into `fields`, its parts as gguf-py has them (key length, key, type, value)."""
        from gguf.gguf_reader import ReaderField

        size, parts, indices, types = self._get_field_parts(offs, raw_type[0])
        head = [key_length, key, raw_type]
        self._push_field(ReaderField(field_offset, str(bytes(key), encoding="utf-8"), head + parts,
                                     [i + len(head) for i in indices], types), skip_sum=True)
        return offs + size

    def _skip_array(self, offs: int) -> int:
        """The offset just past an array value at `offs` (its item type, count, items)."""
        end = len(self.data)
        item_type, count = struct.unpack_from("<IQ", self.data, offs)
        offs += 12
        if item_type == GGUFValueType.STRING:
            for _ in range(count):             # each string: a u64 length, then its bytes
                if offs + 8 > end:
                    raise ValueError("GGUF metadata runs past the end of the file")
                offs += 8 + struct.unpack_from("<Q", self.data, offs)[0]
        elif item_type == GGUFValueType.ARRAY:
            for _ in range(count):
                if offs + 12 > end:
                    raise ValueError("GGUF metadata runs past the end of the file")
                offs = self._skip_array(offs)
        else:
            offs += count * np.dtype(self.gguf_scalar_to_np[GGUFValueType(item_type)]).itemsize
        if offs > end:
            raise ValueError("GGUF metadata runs past the end of the file")
        return offs


class FieldsReader(GGUFReader):
    """gguf.GGUFReader whose metadata walk slices a plain array view of the file instead of its numpy memmap: the
    memmap runs Python code on every slice, and the walk slices each token and merge of a tokenizer (the 1.5B's:
    5.6 -> 1.5 s). The fields hold the same bytes (views of the same mapping); the tensors are gguf-py's own."""

    def _build_fields(self, offs: int, count: int) -> int:
        mapped = self.data
        self.data = mapped.view(np.ndarray)
        try:
            return super()._build_fields(offs, count)
        finally:
            self.data = mapped
