"""Timing only, on a copy of the tree: the amx-emulated-tiles path with tile ops that do nothing (its results are
wrong), so that a CPU without AMX times the tile kernels' vector parts alone (decoding, scale gather, epilogue) at
every row count. Usage: git archive COMMIT src | tar -x -C TREE; python null_tiles.py TREE."""
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
amx = root / "src/multidraft/models/kernels/q8_amx.inc"
text = amx.read_text()
anchor = "// AMX tile data needs the kernel's permission"
assert anchor in text and "struct NullTiles" not in text
amx.write_text(text.replace(anchor, """struct NullTiles {
  static constexpr bool vector_parts = true;
  static void configure(const TileConfig&) {}
  template <int T> static void load(const void*, int64_t) {}
  template <int T> static void zero() {}
  template <int C, int A, int B> static void dpbsud() {}
  template <int C, int A, int B> static void dpbssd() {}
  template <int T> static void store(void*, int64_t) {}
  static void release() {}
};
""" + anchor, 1))
linear = root / "src/multidraft/models/kernels/q8_linear.inc"
text = linear.read_text()
# trees from 2026-12-05's fifth session on pick the Tiles policy in one place (on_tiles)
text = text.replace("else run(EmulatedTilesVectorParts());", "else run(NullTiles());")
assert "amx_x8<EmulatedTilesVectorParts>" in text or "else run(NullTiles());" in text
text = text.replace("amx_x8<EmulatedTilesVectorParts>", "amx_x8<NullTiles>")
text = text.replace("amx_x16<EmulatedTilesVectorParts>", "amx_x16<NullTiles>")
# trees from 2026-12-05 on: the Q5_K and 32-value tile kernels too
text = text.replace("amx_x8<EmulatedTilesVectorParts, true>", "amx_x8<NullTiles, true>")
text = text.replace("else amx_x16_32<EmulatedTilesVectorParts, TYPE>", "else amx_x16_32<NullTiles, TYPE>")
# trees before set_amx_vnni_rows (140d0df): the tile kernels at every row count on this path
text = text.replace("(amx_like(path) && M <= VNNI_MAX_ROWS_Q4_K)", "(path == PATH_AMX && M <= VNNI_MAX_ROWS_Q4_K)")
text = text.replace("(amx_like(path) && M <= VNNI_MAX_ROWS_Q6_K)", "(path == PATH_AMX && M <= VNNI_MAX_ROWS_Q6_K)")
linear.write_text(text)
