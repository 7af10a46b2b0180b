"""Timing only, on a copy of the tree: the amx-emulated-tiles path with tile ops that do nothing (its results are
wrong), so that a CPU without AMX times the tile kernels' vector parts alone (decoding, scale gather, epilogue). For
trees that pick the Tiles policy in `on_tiles` (2026-12-05 on; ../2026-12-04-zen5-amx-vector-parts/null_tiles.py
patched the older ones). Usage: git archive COMMIT src | tar -x -C TREE; python null_tiles.py TREE."""
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
assert text.count("else run(EmulatedTilesVectorParts());") == 1
linear.write_text(text.replace("else run(EmulatedTilesVectorParts());", "else run(NullTiles());"))
