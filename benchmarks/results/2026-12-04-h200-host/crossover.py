"""Where the amx path should hand Q4_K_X8, Q6_K_X16, Q5_K_X8, Q5_0 and Q8_0 in sixteens, IQ4_XS_X8 and Q2_K_X8 (Q6_K, the
32-value formats and Q2_K on limits of their own, the rest on Q4_K's) from its AVX512-VNNI kernels to its tile kernels:
per input row count, one matrix's time on each (gguf_kernels.set_amx_vnni_rows: 0 = tiles at every row count, a huge
limit = VNNI at every row count; the same bits), the weights read from memory (a round over many copies of the 1.5B's
shapes, larger than the caches), 2 threads, min over rounds. Prints a table and the row counts at which VNNI still
wins. The tile kernels run twice: with their tile products overlapped with the previous unit's epilogue ("tiles", the
default) and each epilogue right after its products ("in turn"; gguf_kernels.set_amx_pipelined), to time that order
too.

    PYTHONPATH=src python benchmarks/results/2026-12-04-h200-host/crossover.py --json crossover.json
    (a dry run on a CPU without AMX: --path amx-emulated-tiles --outputs 64 --copies 2 --rounds 1 --rows 1,9)
"""

import argparse
import json
import time

import torch

from multidraft.models import gguf_kernels as g

SHAPES = {"Q4_K": (12, g.Q4_K_X8, 8960, 1536), "Q6_K": (14, g.Q6_K_X16, 1536, 8960),   # gate/up; down
          "Q5_K": (13, g.Q5_K_X8, 8960, 1536),                                    # a Q5_K_M model's
          "Q5_0": (6, g.X16_32[6], 2048, 640), "Q8_0": (8, g.X16_32[8], 1536, 1536),  # gemma3's gate; a Q8_0 q
          "IQ4_XS": (23, g.IQ4_XS_X8, 8960, 1536), "Q2_K": (10, g.Q2_K_X8, 8960, 1536)}   # those models' gate/up


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", default="amx")
    parser.add_argument("--rows", default="1,2,3,4,5,6,7,8,9,10,11,12,14,16,32,64,192")
    parser.add_argument("--outputs", type=int, default=0, help="outputs per matrix (default: the 1.5B's)")
    parser.add_argument("--copies", type=int, default=48, help="matrices per round (48 x ~8-11 MB: past a 300 MB L3)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    g.load(progress=False)
    if g.missing_flag(args.path):
        raise SystemExit(f"the {args.path} path cannot run here: this CPU lacks {g.missing_flag(args.path)}")
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    before, pipelined = g.set_amx_vnni_rows(0, 0), g.set_amx_pipelined(True)
    results = {"path": args.path, "threads": args.threads, "copies": args.copies, "default_limits": before, "us": {}}
    arms = (("vnni", 1 << 40, True), ("tiles", 0, True), ("in turn", 0, False))    # (name, VNNI up to, pipelined)
    try:
        for name, (plain, packed_type, outputs, width) in SHAPES.items():
            outputs = args.outputs or outputs
            one = g.repack(g.random_blocks(plain, outputs, width, generator), packed_type)
            copies = [one.clone() for _ in range(args.copies)]
            table = results["us"][name] = {}
            for rows in [int(r) for r in args.rows.split(",")]:
                x = torch.randn(rows, width, generator=generator)
                best = {}
                for kernel, limit, overlapped in arms:
                    g.set_amx_vnni_rows(limit, limit)
                    g.set_amx_pipelined(overlapped)
                    g.linear_q8_on(x, one, packed_type, width, args.path)
                    times = []
                    for _ in range(args.rounds):
                        start = time.perf_counter()
                        for w in copies:
                            g.linear_q8_on(x, w, packed_type, width, args.path)
                        times.append((time.perf_counter() - start) / len(copies))
                    best[kernel] = round(min(times) * 1e6, 1)
                table[rows] = best
                print(f"{name} {outputs} x {width}, {rows:3d} rows: VNNI {best['vnni']:8.1f} us, tiles "
                      f"{best['tiles']:8.1f} us, tiles in turn {best['in turn']:8.1f} us", flush=True)
            vnni_wins = [r for r, t in table.items() if t["vnni"] <= t["tiles"]]
            limit = before[{"Q6_K": 1, "Q5_0": 2, "Q8_0": 2, "Q2_K": 3}.get(name, 0)]   # (q4_k, q6_k, q32, q2_k)
            print(f"{name}: VNNI wins at {vnni_wins or 'no row count'} (the default limit: {limit})")
            print(f"{name}: tiles overlapped / in turn " + ", ".join(
                f"{r}: {t['tiles'] / t['in turn']:.2f}x" for r, t in table.items()))
    finally:
        g.set_amx_vnni_rows(*before)
        g.set_amx_pipelined(pipelined)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
