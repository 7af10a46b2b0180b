#!/bin/sh
# More 512-bit ops beside vpdpbusd (../2026-12-06-zen4-e2e/pipes512.c's harness, its first 44 lines, with these
# pairs): which ops share vpdpbusd's pipes on this CPU. Run from this folder: sh pipes_more.sh [GHz]
set -e
here=$(dirname "$0")
out=$(mktemp -d)
sed -n 1,44p "$here/../2026-12-06-zen4-e2e/pipes512.c" > "$out/p.c"
cat >> "$out/p.c" <<'C'
  ALONE("vpackssdw", _mm512_packs_epi32(a[i], w));
  PAIR("dpbusd+packssdw", _mm512_dpbusd_epi32(a[i], w, w), _mm512_packs_epi32(a[i + 6], w));
  PAIR("dpbusd+permt2d", _mm512_dpbusd_epi32(a[i], w, w), _mm512_permutex2var_epi32(a[i + 6], idx, w));
  PAIR("dpbusd+mullw", _mm512_dpbusd_epi32(a[i], w, w), _mm512_mullo_epi16(a[i + 6], w));
  PAIR("dpbusd+maddwd", _mm512_dpbusd_epi32(a[i], w, w), _mm512_madd_epi16(a[i + 6], w));
  PAIR("dpbusd+bcastq", _mm512_dpbusd_epi32(a[i], w, w), _mm512_broadcastq_epi64(_mm512_castsi512_si128(a[i + 6])));
  PAIR("dpbusd+sadbw", _mm512_dpbusd_epi32(a[i], w, w), _mm512_sad_epu8(a[i + 6], w));
  return 0;
}
C
gcc -O2 -march=native "$out/p.c" -o "$out/p"
"$out/p" "$@"
rm -r "$out"
