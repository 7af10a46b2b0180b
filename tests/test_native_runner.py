"""The native forward (models/native.py): the quantized runner's logits bit for bit, without HF's modules.

Each check compares the native runner with the quantized runner on HF's modules (same GGUF, same activations) on
the same tokens: a prefill, verifies of 2..40 rows, a tree, captures, the engine's packed forward, 1 and 2
threads. A negative control shows the comparison sees a one-rounding change in the fp32 arithmetic around the
linears.
"""

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import multidraft
from multidraft.models import gguf_kernels, native
from multidraft.models.kv_cache import KVCache
from multidraft.models.packed import KVArena, Segment, packed_forward
from tests.tiny_gguf import tiny_gguf_lm

pytestmark = pytest.mark.skipif(not gguf_kernels.load(progress=False),
                                reason=f"quantized kernels unavailable: {gguf_kernels.unavailable_reason()}")

# (arch, block format): Qwen2 with its q/k/v biases on 8-bit activations (Q4_K, and Q5_K as Q5_K_M models have
# it), Llama on Q6_K (8-bit) and on F16 (no 8-bit kernel, so fp32 activations: its prefills of more than 64 rows
# take the dense GEMM, the native forward must too), Gemma3 (tied head, per-head norms, a sliding window of 8 keys
# that every prompt here outgrows), Qwen3 (per-head norms, head_dim apart from hidden / heads) and Mistral (Llama's
# layers; its GGUF is llama.cpp's "llama" architecture) on Q8_0.
CASES = [("qwen2", "Q4_K"), ("qwen2", "Q5_K"), ("llama", "Q6_K"), ("llama", "F16"), ("gemma3", "Q4_K"),
         ("qwen3", "Q4_K"), ("mistral", "Q8_0")]
PROMPT = [(7 * i + 3) % 60 + 1 for i in range(70)]          # longer than PREFILL_GEMM_ROWS


def _pair(arch, type_name):
    """(native LM, quantized-q8 LM on HF's modules) of one tiny GGUF model."""
    with pytest.warns(RuntimeWarning, match="change nothing") if type_name == "F16" else _nothing():
        ours = tiny_gguf_lm(arch, type_name, seed=3, runner="native")
        reference = tiny_gguf_lm(arch, type_name, seed=3, runner="quantized-q8")
    assert (ours.runner, reference.runner) == ("native", "quantized-q8")
    return ours, reference


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture(scope="module", params=CASES, ids=["-".join(c) for c in CASES])
def pair(request):
    return _pair(*request.param)


def _threads(count):
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    return previous


def _same_forwards(lm, steps):
    """Logits of a fixed sequence of forwards (prefill, chain steps, a verify, a tree with captures), on the
    runner's own cache (the native runner's GrowingKVCache)."""
    cache = lm.new_cache()
    out = [lm.forward(cache, PROMPT).logits, lm.forward(cache, [4]).logits, lm.forward(cache, steps).logits]
    tree = lm.forward(cache, [4, 50, 17, 51, 30], parents=[-1, -1, 0, 0, 2], hidden_layer=2,
                      attention_heads=[(0, 1), (1, 3), (1, 0)])
    out += [tree.logits, tree.hidden, tree.attention.weights(4, list(range(cache.length - 5)) + [cache.length - 5,
                                                                                                  cache.length - 3,
                                                                                                  cache.length - 1])]
    out.append(lm.forward(cache, [9], hidden_layer=0, logits_rows=slice(-1, None)).hidden)
    out.append(lm.forward(cache, inputs_embeds=lm.embed([12, 13])).logits)          # embeddings in (superposed)
    past = cache.length                                     # the general form: a tree grown on cached tree nodes
    allowed = torch.ones(3, past + 3, dtype=torch.bool)
    allowed[:, past - 2] = False                            # no row sees the 13 above
    allowed[1, past] = allowed[2, past + 1] = False
    out.append(lm.forward(cache, [20, 21, 22], visible=(allowed, [past - 2, past - 1, past - 1])).logits)
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_native_logits_and_captures_are_the_quantized_runners_bits(pair, threads):
    ours, reference = pair
    previous = _threads(threads)
    try:
        steps = [(5 * i + 2) % 60 + 1 for i in range(23)]
        got, expected = _same_forwards(ours, steps), _same_forwards(reference, steps)
    finally:
        torch.set_num_threads(previous)
    for index, (a, b) in enumerate(zip(got, expected)):
        assert torch.equal(a, b), index


def test_native_is_batch_invariant_alone_in_verifies_and_trees_at_1_and_2_threads(pair):
    ours, _ = pair
    steps = [(11 * i + 5) % 60 + 1 for i in range(40)]
    previous = _threads(1)
    try:
        alone = KVCache()
        ours.forward(alone, PROMPT[:20])
        single = torch.cat([ours.forward(alone, [token]).logits for token in steps])
        for count in (1, 2):
            torch.set_num_threads(count)
            for rows in (2, 3, 8, 17, 40):
                cache = KVCache()
                ours.forward(cache, PROMPT[:20])
                assert torch.equal(ours.forward(cache, steps[:rows]).logits, single[:rows]), (count, rows)
            cache = KVCache()
            ours.forward(cache, PROMPT[:20])
            tree = ours.forward(cache, [steps[0], 50, steps[1], 51, steps[2]], parents=[-1, -1, 0, 0, 2]).logits
            assert torch.equal(tree[[0, 2, 4]], single[:3])
    finally:
        torch.set_num_threads(previous)


def test_packed_forward_on_native_is_the_single_request_bits(pair):
    """The engine's packed forward runs the same native forward: a request's logits are the bits it gets alone
    (and the quantized runner's in the same packing); Gemma3's sliding window by position inside each region."""
    ours, reference = pair
    prompt = PROMPT[:40]
    alone = KVCache()
    ours.forward(alone, prompt)
    single = [ours.forward(alone, [token]).logits[0] for token in (4, 17, 30)]
    results = []
    for lm in (ours, reference):
        arena = KVArena(1024)
        mine, other = arena.allocate(200), arena.allocate(200)
        packed_forward(lm, arena, [Segment(other, [3, 4, 5, 6, 7], None, False), Segment(mine, prompt, None, False)])
        rows = []
        for token in (4, 17, 30):
            out = packed_forward(lm, arena, [Segment(other, [9, 10, 11], [-1, 0, 0], hidden_layer=1),
                                             Segment(mine, [token], hidden_layer=1)])
            rows.append((out[1].logits[0], out[1].hidden, out[0].logits))
        results.append(rows)
    for (logits, hidden, others), (ref_logits, ref_hidden, ref_others), expected in zip(*results, single):
        assert torch.equal(logits, expected) and torch.equal(logits, ref_logits)
        assert torch.equal(hidden, ref_hidden) and torch.equal(others, ref_others)


def _packed_forwards(lm):
    """Logits and the arena's keys of a fixed sequence of packed forwards: two prompts read side by side, then
    steps where one request decodes a row and the other verifies a tree (the engine's decode step)."""
    arena = KVArena(1024)
    mine, other = arena.allocate(300), arena.allocate(300)
    logits = [out.logits for out in packed_forward(lm, arena, [Segment(other, [3, 4, 5, 6, 7], None, False),
                                                                Segment(mine, PROMPT[:40], None, False)])]
    for token in (4, 17, 30):
        logits += [out.logits for out in packed_forward(lm, arena, [Segment(other, [9, 10, 11], [-1, 0, 0]),
                                                                     Segment(mine, [token])])]
    return logits, [keys.clone() for keys in arena.keys]


def test_packed_forward_runs_the_fused_ops_with_the_step_by_step_bits(monkeypatch):
    """The engine's packed forward on an arena runs every layer in one op (registered_stack, the rows' keys and values
    written at the arena's scattered slots) with the bits of the layer-by-layer op and of the step-by-step loop:
    logits and the arena's keys."""
    stacks = []
    op = gguf_kernels.registered_stack
    monkeypatch.setattr(gguf_kernels, "registered_stack", lambda *args: stacks.append(1) or op(*args))
    ours, _ = _pair("qwen2", "Q4_K")
    forward = ours.runner_object.native
    try:
        stacked = _packed_forwards(ours)
        assert len(stacks) == 4
        forward.fuse_stack = False
        layered = _packed_forwards(ours)
        forward.fuse = False
        stepwise = _packed_forwards(ours)
    finally:
        forward.fuse = forward.fuse_stack = True
    assert len(stacks) == 4
    for run in (stacked, layered):
        assert all(torch.equal(a, b) for a, b in zip(run[0], stepwise[0]))
        assert all(torch.equal(a, b) for a, b in zip(run[1], stepwise[1]))


@pytest.mark.parametrize("method", ["pld", "suffix", "pld_plus"])
def test_lossless_methods_on_native_give_its_greedy_tokens(pair, method):
    ours, reference = pair
    for text in ["the cat sat on the mat and the cat sat on", "a dog ran on the mat . a dog ran"]:
        greedy = multidraft.generate(ours, text, method="greedy", max_new_tokens=40, temperature=0).token_ids
        assert multidraft.generate(ours, text, method=method, max_new_tokens=40, temperature=0).token_ids == greedy
        assert multidraft.generate(reference, text, method="greedy", max_new_tokens=40,
                                   temperature=0).token_ids == greedy


def test_prefix_cache_reuse_on_native_gives_the_tokens_of_a_fresh_run():
    ours, _ = _pair("qwen2", "Q4_K")
    cache = multidraft.PrefixCache()
    one = multidraft.generate(ours, PROMPT, method="suffix", max_new_tokens=20, prefix_cache=cache)
    second = PROMPT + list(one.token_ids) + [4, 8, 15, 16, 23, 42]
    with_cache = multidraft.generate(ours, second, method="suffix", max_new_tokens=20, prefix_cache=cache)
    assert with_cache.stats.prefix_reused_tokens > len(PROMPT)
    assert with_cache.token_ids == multidraft.generate(ours, second, method="suffix", max_new_tokens=20).token_ids


def _rotary_torch(q, k, cos, signed_sin, fused=False):
    """The rotary as torch ops (what native.py ran before the kernel op): x * cos + roll(x, D/2) * signed_sin, the
    products rounded, then the sum; fused: one rounding per value (the negative control)."""
    D = cos.shape[-1]
    both = torch.cat((q.view(1, q.shape[1], -1, D), k.view(1, k.shape[1], -1, D)), dim=2).transpose(1, 2)
    rolled = both.roll(D // 2, dims=-1)
    if fused:
        both = torch.addcmul(rolled.double() * signed_sin.double(), both.double(), cos.double()).float()
    else:
        both = (both * cos) + (rolled * signed_sin)
    heads = q.shape[-1] // D
    return both[0, :heads].contiguous(), both[:, heads:].contiguous()


def _norm_torch(x, branch, weight, eps, divided=False):
    """Residual + RMSNorm as HF's torch ops; divided: x / sqrt(...) instead of x * rsqrt(...) (the control)."""
    x = x if branch is None else x + branch
    variance = x.pow(2).mean(-1, keepdim=True)
    return x, weight * (x / torch.sqrt(variance + eps) if divided else x * torch.rsqrt(variance + eps))


@pytest.mark.parametrize("rows", [1, 2, 5, 17, 40])
def test_layer_ops_are_torchs_fp32_operations_bit_for_bit(rows):
    """The native forward's residual + RMSNorm and rotary kernel ops against HF's torch ops on random values
    (widths 1536 and 576, head dims 128 and 64, eps 1e-6 and 1e-5), and the controls (another rounding) differ."""
    generator = torch.Generator().manual_seed(rows)
    for width, head_dim, eps in ((1536, 128, 1e-6), (576, 64, 1e-5)):
        x, branch = (torch.randn(1, rows, width, generator=generator) * 3 for _ in range(2))
        weight = torch.randn(width, generator=generator)
        for b in (None, branch):
            got, expected = native._add_rms_norm(x, b, weight, eps), _norm_torch(x, b, weight, eps)
            assert all(torch.equal(g, e) for g, e in zip(got, expected))
        assert not torch.equal(got[1], _norm_torch(x, branch, weight, eps, divided=True)[1])
        q = torch.randn(1, rows, 6 * head_dim, generator=generator)
        k = torch.randn(1, rows, 2 * head_dim, generator=generator)
        angles = torch.rand(rows, head_dim, generator=generator) * 100
        cos, sin = angles.cos(), angles.sin()
        got, expected = native._rotary_heads(q, k, cos, sin), _rotary_torch(q, k, cos, sin)
        assert all(torch.equal(g, e) for g, e in zip(got, expected))
        assert not torch.equal(got[0], _rotary_torch(q, k, cos, sin, fused=True)[0])


@pytest.mark.parametrize("rows", [1, 3, 40])
def test_rotary_store_and_silu_mul_are_torchs_bits(rows):
    """The rotary op that writes the cache (keys rotated into slots [start, start + T) of a (1, KVH, slots, D)
    buffer, values copied, other slots untouched) and silu(gate) * up in one op, against the torch ops."""
    generator = torch.Generator().manual_seed(100 + rows)
    for head_dim, heads, kv_heads in ((128, 12, 2), (64, 9, 3)):
        q = torch.randn(1, rows, heads * head_dim, generator=generator)
        k, v = (torch.randn(1, rows, kv_heads * head_dim, generator=generator) for _ in range(2))
        angles = torch.rand(rows, head_dim, generator=generator) * 100
        cos, sin = angles.cos(), angles.sin()
        keys, values = (torch.randn(1, kv_heads, 50, head_dim, generator=generator) for _ in range(2))
        before = keys.clone(), values.clone()
        got_q = native._rotary_store(q, k, v, cos, sin, keys, values, 7)
        expected_q, expected_k = _rotary_torch(q, k, cos, sin)
        assert torch.equal(got_q, expected_q) and torch.equal(keys[:, :, 7:7 + rows], expected_k)
        assert torch.equal(values[:, :, 7:7 + rows], v.view(1, rows, kv_heads, head_dim).transpose(1, 2))
        for buffer, old in zip((keys, values), before):
            assert torch.equal(buffer[:, :, :7], old[:, :, :7]) and torch.equal(buffer[:, :, 7 + rows:], old[:, :, 7 + rows:])
    for width in (8960, 1536, 37):
        gate, up = (torch.randn(1, rows, width, generator=generator) * 4 for _ in range(2))
        expected = torch.nn.functional.silu(gate) * up
        assert torch.equal(native._silu_mul(gate, up), expected)
        assert not torch.equal(_silu_mul_rounded_once(gate, up), expected)


def _silu_mul_rounded_once(gate, up):
    """The control: silu * up in float64, rounded once (another rounding than torch's)."""
    gate, up = gate.double(), up.double()
    return (gate / (1 + torch.exp(-gate)) * up).float()


def test_rms_norm_mean_is_torchs_on_many_rows():
    """The norm's mean (torch's sum divided by the count) on many rows against torch's mean; the control (the sum
    times the count's reciprocal) differs from it on these rows, so the check can see another division."""
    generator = torch.Generator().manual_seed(9)
    for width in (1536, 576, 960):
        x = torch.randn(1, 4000, width, generator=generator) * 2
        weight = torch.ones(width)
        _, normed = native._add_rms_norm(x, None, weight, 1e-6)
        assert torch.equal(normed, _norm_torch(x, None, weight, 1e-6)[1])
        squares = x.pow(2)
        assert not torch.equal(squares.sum(-1) * (1 / width), squares.mean(-1))


NORM_SUM_CHECK = """
import torch
from multidraft.models import gguf_kernels, native
from tests.test_native_runner import _norm_sums_are_torchs
print("lanes", gguf_kernels.torch_sum_lanes(), "mismatches of a sequential sum", _norm_sums_are_torchs())
"""


def _norm_sums_are_torchs() -> int:
    """The norm with its sum of squares written out in torch's order (one thread's worth of values) against HF's
    torch ops, widths 16 to 30000 (through every level of torch's cascade), 1-7 rows, three scales; -> how often a
    plain sequential sum would have given other bits (the control: the check can see a summation order)."""
    generator = torch.Generator().manual_seed(11)
    sequential_differs = 0
    for width in (16, 17, 31, 64, 100, 256, 576, 640, 896, 960, 1536, 2048, 3000, 4096, 8192, 16384, 30000):
        weight = torch.randn(width, generator=generator)
        for rows in (1, 2, 3, 7):
            if rows * width >= 32768:                   # torch may split those over threads: its sum is called
                continue
            for scale in (1e-3, 1.0, 30.0):
                x = torch.randn(1, rows, width, generator=generator) * scale
                _, normed = native._add_rms_norm(x, None, weight, 1e-6)
                assert torch.equal(normed, _norm_torch(x, None, weight, 1e-6)[1]), (width, rows, scale)
                sequential = x.pow(2).cumsum(-1)[..., -1:] / width
                sequential_differs += int(not torch.equal(normed, weight * (x * torch.rsqrt(sequential + 1e-6))))
    return sequential_differs


@pytest.mark.parametrize("capability", [None, "avx2"])
def test_rms_norm_sum_is_torchs_order_written_out(capability):
    """The norms sum their squares in torch's own order (SumKernel's cascade over 8-lane vectors: its AVX2 kernel
    serves AVX512 CPUs too) instead of calling at::sum: the bits of HF's torch ops, here and with torch forced onto
    its AVX2 kernels (ATEN_CPU_CAPABILITY, in a child process: what an AVX2-only CPU runs). A sequential sum gives
    other bits on some of these rows, so the check sees an order."""
    if capability is None:
        assert gguf_kernels.torch_sum_lanes() == 8
        assert _norm_sums_are_torchs() > 0
        x, weight = torch.randn(1, 3, 896) * 5, torch.randn(896)       # and with torch's sum called: the same bits
        written = native._add_rms_norm(x, None, weight, 1e-6)[1]
        before = gguf_kernels.set_torch_sum_written(False)
        try:
            assert torch.equal(native._add_rms_norm(x, None, weight, 1e-6)[1], written)
        finally:
            gguf_kernels.set_torch_sum_written(before)
        return
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", NORM_SUM_CHECK], env=env, capture_output=True, text=True,
                          timeout=600, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    lanes, mismatches = done.stdout.split()[1], int(done.stdout.split()[-1])
    assert lanes == "8" and mismatches > 0, done.stdout


def test_rotary_tables_are_the_bits_of_each_forward(pair):
    """cos / signed sin read from the tables grown by blocks equal the ones computed for the forward's own rows (1,
    several, unordered, past a block), head dims 64 (the tiny models) and 128; the control (the angles computed in
    float64, then rounded) differs, so the check sees one rounding."""
    assert native.NativeForward(pair[0].model).rotaries[native.FULL].head_dim == 64
    for head_dim in (64, 128):
        rotary = native.RotaryTable(1.0 / (10000.0 ** (torch.arange(0, head_dim, 2) / head_dim)), 1.0)
        for positions in ([0], [255], [256], [700], list(range(300, 340)), [9, 3, 600, 4]):
            positions = torch.tensor(positions)
            got, expected = rotary(positions), rotary.rows(positions)
            assert all(torch.equal(g, e) for g, e in zip(got, expected))
        table = rotary._tables[0]
        assert table.shape[0] % native.ROTARY_BLOCK == 0
        angles = torch.arange(700).double()[:, None] * rotary.inv_freq.double()
        assert not torch.equal(torch.cat((angles, angles), -1).cos().float(), table[:700])


def test_all_finite_sees_every_nan_and_infinity():
    x = torch.randn(1000)
    assert gguf_kernels.all_finite(x) and gguf_kernels.all_finite(torch.full((13,), 3e38))
    assert gguf_kernels.all_finite(torch.empty(0))
    for bad in (float("nan"), float("inf"), -float("inf")):
        for where in (0, 5, 991, 995, 999):             # in the 8-lane part and in the tail
            y = x.clone()
            y[where] = bad
            assert not gguf_kernels.all_finite(y)


def _rotary_fused(q, k, cos, signed_sin):
    return _rotary_torch(q, k, cos, signed_sin, fused=True)


def _norm_divided(x, branch, weight, eps):
    return _norm_torch(x, branch, weight, eps, divided=True)


def _linears_nudged(matrices, x, activations, biases, prefill=False):
    """q / k / v (gate / up) on an input one int8 step away in one value: a shared quantization gone wrong."""
    from multidraft.models.quantized import block_linears

    nudged = x.clone()
    nudged[..., 0] -= torch.sign(nudged[..., 0]) * nudged[..., :32].abs().amax(-1) / 127
    return block_linears(matrices, nudged, activations, biases, prefill)


def _rotary_store_fused(q, k, v, cos, signed_sin, keys, values, start):
    query, key = _rotary_torch(q, k, cos, signed_sin, fused=True)
    keys[:, :, start:start + key.shape[2]] = key
    values[:, :, start:start + key.shape[2]] = v.view(1, key.shape[2], -1, key.shape[3]).transpose(1, 2)
    return query


@pytest.mark.parametrize("name,variant,tolerance", [("_add_rms_norm", _norm_divided, 1e-2),
                                                    ("_rotary_heads", _rotary_fused, 1e-2),
                                                    ("_rotary_store", _rotary_store_fused, 1e-2),
                                                    ("_silu_mul", _silu_mul_rounded_once, 1e-2),
                                                    ("block_linears", _linears_nudged, 1e-1)])
def test_negative_control_another_rounding_around_the_linears_is_seen(monkeypatch, name, variant, tolerance):
    """Another order of the fp32 operations around the kernels (the norm divided, the rotary rounded once) or a
    shared input quantized one int8 step off (the random tiny model amplifies it: a looser bound):
    close, but not the same bits, so the bit checks above see it. 32 tokens: a one-ulp change of silu * up reaches
    the logits only where it moves an 8-bit activation block's rounding (none did in this model's first 20)."""
    ours, reference = _pair("qwen2", "Q4_K")
    ours.runner_object.native.fuse = False          # the step-by-step layer (the fused op: the tests below)
    expected = reference.forward(KVCache(), PROMPT[:32]).logits
    # the runner's own cache takes the rotary op that writes it (_rotary_store), HF's takes _rotary_heads
    cache = ours.new_cache if name == "_rotary_store" else KVCache
    assert torch.equal(ours.forward(cache(), PROMPT[:32]).logits, expected)
    monkeypatch.setattr(native, name, variant)
    changed = ours.forward(cache(), PROMPT[:32]).logits
    assert not torch.equal(changed, expected)
    assert float((changed - expected).abs().max()) <= tolerance * float(expected.abs().max())


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_decoder_layers_are_the_step_by_step_layers_bits(monkeypatch, threads):
    """On the runner's own cache with 8-bit activations each layer runs as one op (gguf_kernels.decoder_layer), and a
    forward that captures and checks nothing runs all its layers in one op (registered_stack): both give the bits of the
    step-by-step loop over every forward of _same_forwards (prefill, verify, tree with captures, embeddings in, a
    general visibility), Qwen2 with q/k/v biases, Llama and Gemma3 (six norms, two kinds of layer), Qwen2 as llama.cpp
    writes IQ4_NL (q / k / o / gate / up in IQ4_NL, v / down in Q5_K: two activation blocks in one layer), and each
    fused op is what ran where it should."""
    calls = {"decoder_layer": 0, "registered_stack": 0}
    for name in calls:
        op = getattr(gguf_kernels, name)
        monkeypatch.setattr(gguf_kernels, name, lambda *args, op=op, name=name: calls.__setitem__(name, calls[name] + 1)
                            or op(*args))
    steps = [(5 * i + 2) % 60 + 1 for i in range(23)]
    previous = _threads(threads)
    try:
        for arch, type_name in (("qwen2", "Q4_K"), ("llama", "Q6_K"), ("gemma3", "Q4_K"), ("qwen2", "IQ4_NL/Q5_K")):
            ours = tiny_gguf_lm(arch, type_name, seed=3, runner="native")
            forward = ours.runner_object.native
            assert forward.fuse and forward.fuse_stack
            stacked = _same_forwards(ours, steps)
            # one forward (the tree) captures per layer: it runs layer by layer; the other six in one op each
            assert calls == {"decoder_layer": len(forward.layers), "registered_stack": 6}
            forward.fuse_stack = False
            layered = _same_forwards(ours, steps)
            assert calls == {"decoder_layer": 8 * len(forward.layers), "registered_stack": 6}
            forward.fuse = False
            stepwise = _same_forwards(ours, steps)
            assert calls == {"decoder_layer": 8 * len(forward.layers), "registered_stack": 6}
            for index, (a, b, c) in enumerate(zip(stacked, layered, stepwise)):
                assert torch.equal(a, c) and torch.equal(b, c), (arch, index)
            calls.update(decoder_layer=0, registered_stack=0)
    finally:
        torch.set_num_threads(previous)


def test_the_mlp_buffers_reused_across_layers_keep_the_bits_and_are_freed_after_each_forward(monkeypatch):
    """decoder_layer writes gate, up and their product into buffers its thread reuses from layer to layer (a long
    prompt's fresh 73 MB tensors cost their page faults per layer); the forward frees them at its end. Kept across
    forwards instead (release a no-op), a larger buffer then serves a smaller forward: the same bits (Qwen2's SiLU and
    Gemma3's GELU)."""
    steps = [(5 * i + 2) % 60 + 1 for i in range(23)]
    release = gguf_kernels.release_layer_scratch
    for arch in ("qwen2", "gemma3"):
        ours = tiny_gguf_lm(arch, "Q4_K", seed=3, runner="native")
        expected = _same_forwards(ours, steps)
        assert gguf_kernels.layer_scratch_bytes() == 0
        monkeypatch.setattr(gguf_kernels, "release_layer_scratch", lambda: None)
        kept = _same_forwards(ours, steps)
        width = ours.runner_object.native.layers[0].gate[0].rows
        assert gguf_kernels.layer_scratch_bytes() == 3 * 4 * width * max(len(steps), len(PROMPT))   # the largest
        monkeypatch.setattr(gguf_kernels, "release_layer_scratch", release)
        release()
        assert all(torch.equal(a, b) for a, b in zip(expected, kept)), arch
        before = gguf_kernels.set_layer_scratch(False)          # fresh tensors per layer (the A/B knob)
        try:
            fresh = _same_forwards(ours, steps)
        finally:
            gguf_kernels.set_layer_scratch(before)
        assert all(torch.equal(a, b) for a, b in zip(expected, fresh)), arch


def test_a_registered_stack_is_the_stack_given_per_call_and_a_released_one_is_refused(monkeypatch):
    """The native forward registers its layers' weights once (RegisteredStack) and passes their number: the bits of
    decoder_stack given every weight with the call. A released stack's number is refused with a clear error, and
    the stack is released when the forward that holds it goes."""
    ours = tiny_gguf_lm("qwen2", "Q4_K", seed=3, runner="native")
    forward = ours.runner_object.native
    expected = ours.forward(ours.new_cache(), PROMPT[:12]).logits
    packs = forward._fused
    weights = [[item for pack in packs for item in pack[part]] for part in range(5)]

    def per_call(x, h, stack, cos, sin, keys, values, start, visible, scaling, row_slots=None):
        assert stack is forward._stack
        return gguf_kernels.decoder_stack(x, h, *weights, cos, sin, keys, values, start, visible,
                                          forward._kind_index, scaling, row_slots)

    monkeypatch.setattr(gguf_kernels, "registered_stack", per_call)
    assert torch.equal(ours.forward(ours.new_cache(), PROMPT[:12]).logits, expected)
    monkeypatch.undo()
    stack = gguf_kernels.RegisteredStack(*weights, forward._kind_index)
    handle = stack.handle
    assert handle != forward._stack.handle
    del stack
    gc.collect()
    x = torch.zeros(1, 1, 8)                              # refused before any tensor is read
    with pytest.raises(RuntimeError, match="no stack is registered"):
        torch.ops.multidraft_gguf.registered_stack(handle, x, x, [], [], [], [], 0, [], 1.0, None)


def test_a_check_between_layers_keeps_the_layer_loop(monkeypatch):
    """A forward whose model is watched between layers (a deadline, a cancel: forward_watch.py) runs layer by layer,
    so each check runs before its layer."""
    ours = tiny_gguf_lm("qwen2", "Q4_K", seed=3, runner="native")
    stacks = []
    op = gguf_kernels.registered_stack
    monkeypatch.setattr(gguf_kernels, "registered_stack", lambda *args: stacks.append(1) or op(*args))
    seen = []
    handles = ours.forward_watch.add(None, lambda: seen.append(1))
    try:
        ours.forward(ours.new_cache(), PROMPT[:12])
    finally:
        for handle in handles:
            handle.remove()
    assert len(seen) == len(ours.runner_object.native.layers) and not stacks
    ours.forward(ours.new_cache(), PROMPT[:12])
    assert stacks == [1]


@pytest.mark.parametrize("name", ["decoder_layer", "registered_stack"])
def test_fused_layers_negative_control_a_nudged_residual_is_seen(monkeypatch, name):
    """The comparisons above see a one-ulp change of the residual stream entering a fused op."""
    ours = tiny_gguf_lm("qwen2", "Q4_K", seed=3, runner="native")
    ours.runner_object.native.fuse_stack = name == "registered_stack"
    expected = ours.forward(ours.new_cache(), PROMPT[:12]).logits
    fused_op = getattr(gguf_kernels, name)
    monkeypatch.setattr(gguf_kernels, name,
                        lambda x, *rest: fused_op(torch.nextafter(x, torch.full_like(x, float("inf"))), *rest))
    changed = ours.forward(ours.new_cache(), PROMPT[:12]).logits
    assert not torch.equal(changed, expected)
    assert float((changed - expected).abs().max()) <= 1e-2 * float(expected.abs().max())


def test_stage_times_count_the_ops_the_fused_layers_call():
    """forward-cost's outside-the-linears share reads the kernels' own clocks: while on, they count the linears,
    the attention and the elementwise steps a fused layer (and the fused stack) calls from C++; nothing while off."""
    ours = tiny_gguf_lm("qwen2", "Q4_K", seed=3, runner="native")
    cache = ours.new_cache()
    ours.forward(cache, PROMPT[:12])
    for stack in (True, False):
        ours.runner_object.native.fuse_stack = stack
        gguf_kernels.stage_times(False)
        ours.forward(cache, [5])
        assert set(gguf_kernels.stage_times(True).values()) == {0}
        ours.forward(cache, [6])
        spent = gguf_kernels.stage_times(False)
        assert list(spent) == ["linears", "attention", "layer steps"] and min(spent.values()) > 0
        ours.forward(cache, [7])
        assert set(gguf_kernels.stage_times(False).values()) == {0}


def test_unsupported_architectures_stay_on_hf_modules():
    ours, _ = _pair("qwen2", "Q4_K")
    assert native.unsupported_reason(ours.model) is None
    ours.model.config.hidden_act = "gelu"
    try:
        assert "gelu" in native.unsupported_reason(ours.model)
        with pytest.warns(RuntimeWarning, match="native runner cannot serve"):
            assert ours.use_runner("native") == "quantized-q8"
    finally:
        ours.model.config.hidden_act = "silu"
    assert ours.use_runner("native") == "native" and ours.capabilities.prefix_reusable
    assert ours.use_runner("quantized") == "quantized" and not ours.capabilities.prefix_reusable


# ---------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def smollm_pair():
    import os

    from multidraft.errors import ModelNotFoundError
    from multidraft.models.loader import load_model
    try:
        ours = load_model("smollm2-135m", runner="native")
        reference = load_model("smollm2-135m", runner="quantized-q8")
    except ModelNotFoundError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"SmolLM2-135M not pulled: {exc}")
    if ours.runner != "native":
        pytest.skip("this SmolLM2 pull predates kept GGUF files")
    return ours, reference


@pytest.mark.real_model
def test_smollm_native_equals_quantized_q8_and_keeps_greedy(smollm_pair):
    ours, reference = smollm_pair
    ids = ours.encode("def fibonacci(n):\n    if n < 2:")
    a, b = KVCache(), KVCache()
    assert torch.equal(ours.forward(a, ids).logits, reference.forward(b, ids).logits)
    assert torch.equal(ours.forward(a, [13, 14, 15], parents=[-1, 0, 0]).logits,
                       reference.forward(b, [13, 14, 15], parents=[-1, 0, 0]).logits)
    prompt = "x = [1, 2, 3]\ny = [v * 2 for v in x]\n"
    greedy = multidraft.generate(ours, prompt, method="greedy", max_new_tokens=24, temperature=0).token_ids
    assert multidraft.generate(reference, prompt, method="greedy", max_new_tokens=24, temperature=0).token_ids == greedy
    for method in ("pld", "suffix"):
        assert multidraft.generate(ours, prompt, method=method, max_new_tokens=24, temperature=0).token_ids == greedy


def test_growing_cache_gives_the_dynamic_caches_bits_across_growth_keep_and_prefix_reuse(monkeypatch):
    """The native runner's in-place cache (GrowingKVCache) against HF's DynamicCache on the same runner: a prefill
    up to its first buffer's edge, a verify that makes it grow, a tree whose accepted path is kept (slots move),
    captures taken before a later forward overwrites the buffer, and a prefix copied out and loaded back."""
    from multidraft.models.kv_cache import GrowingKVCache

    monkeypatch.setattr(GrowingKVCache, "MIN_SLOTS", 64)     # the tiny model's context is 256
    ours, _ = _pair("qwen2", "Q4_K")
    prompt = [(13 * i + 7) % 60 + 1 for i in range(GrowingKVCache.MIN_SLOTS - 3)]
    results = []
    for cache in (ours.new_cache(), KVCache()):
        out = [ours.forward(cache, prompt).logits, ours.forward(cache, list(range(1, 11))).logits]  # grows
        tree = ours.forward(cache, [4, 50, 17, 51, 30], parents=[-1, -1, 0, 0, 2], attention_heads=[(1, 0)])
        cache.keep(cache.length - 5, [cache.length - 5, cache.length - 3, cache.length - 1])
        out.append(ours.forward(cache, [9, 10]).logits)
        out.append(tree.attention.weights(4, list(range(cache.length - 7)) + [cache.length - 7, cache.length - 5,
                                                                               cache.length - 3]))
        keys, values = cache.prefix_tensors(cache.length)
        fresh = ours.new_cache() if isinstance(cache, GrowingKVCache) else KVCache()
        fresh.load_prefix(keys, values, cache.length - 2)
        out.append(ours.forward(fresh, [9, 10, 11]).logits)
        results.append((type(cache).__name__, out))
    (growing, got), (_, expected) = results
    assert growing == "GrowingKVCache"
    for index, (a, b) in enumerate(zip(got, expected)):
        assert torch.equal(a, b), index


def test_growing_cache_negative_control_growth_without_copy_is_seen(monkeypatch):
    """A buffer that grows without copying the old rows gives other logits: the comparison above can fail."""
    from multidraft.models.kv_cache import GrowingKVCache

    def grown_empty(self, buffer, needed):
        return buffer.new_zeros((*buffer.shape[:2], 1 << (needed - 1).bit_length(), buffer.shape[3]))

    monkeypatch.setattr(GrowingKVCache, "MIN_SLOTS", 64)     # the tiny model's context is 256
    ours, _ = _pair("qwen2", "Q4_K")
    prompt = [(13 * i + 7) % 60 + 1 for i in range(GrowingKVCache.MIN_SLOTS - 3)]
    dynamic = KVCache()
    ours.forward(dynamic, prompt)
    expected = ours.forward(dynamic, list(range(1, 11))).logits
    monkeypatch.setattr(GrowingKVCache, "_grown", grown_empty)
    cache = ours.new_cache()
    ours.forward(cache, prompt)
    assert not torch.equal(ours.forward(cache, list(range(1, 11))).logits, expected)


def test_q4_k_matrices_are_packed_for_the_8bit_kernels_and_the_logits_keep_their_bits():
    ours, reference = _pair("qwen2", "Q4_K")
    steps = [(3 * i + 1) % 60 + 1 for i in range(9)]
    for lm in (ours, reference):
        assert all(m.gguf_matrix.packed is not None for m in lm.model.modules() if isinstance(m, torch.nn.Linear))
    packed = _same_forwards(ours, steps)
    for module in reference.model.modules():      # the HF-module runner reads each matrix's weights per call
        if isinstance(module, torch.nn.Linear):
            module.gguf_matrix.packed = None
    plain = _same_forwards(reference, steps)
    for index, (a, b) in enumerate(zip(packed, plain)):
        assert torch.equal(a, b), index


@pytest.mark.parametrize("type_name", ["Q4_K", "Q6_K"])
def test_a_vocabulary_not_in_sixteens_packs_its_head_and_keeps_the_logits_bits(type_name):
    """A head of 70 rows (a vocabulary with a few tokens added, 32002 say) is packed with its last row repeated to
    whole groups; the native forward's logits have 70 columns and the bits of the HF-module runner's over the plain
    blocks."""
    ours = tiny_gguf_lm("qwen2", type_name, seed=3, runner="native", vocab_size=70)
    reference = tiny_gguf_lm("qwen2", type_name, seed=3, runner="quantized-q8", vocab_size=70)
    head = ours.model.lm_head.gguf_matrix
    assert head.rows == 70 and head.packed is not None and head.padded_rows > 0
    steps = [(3 * i + 1) % 60 + 1 for i in range(9)]
    packed = _same_forwards(ours, steps)
    reference.model.lm_head.gguf_matrix.packed = None       # the HF-module runner reads each matrix's weights per call
    plain = _same_forwards(reference, steps)
    assert packed[0].shape[-1] == 70
    for index, (a, b) in enumerate(zip(packed, plain)):
        assert torch.equal(a, b), index


def test_a_packed_matrix_gives_back_its_file_pages_and_reads_the_same_bytes_after():
    lm = tiny_gguf_lm("qwen2", "Q4_K", seed=5, runner="quantized-q8")
    weights, matrix = lm.model.gguf_weights, lm.model.model.layers[0].mlp.gate_proj.gguf_matrix
    assert matrix.packed is not None
    copy = matrix.blocks.clone()                     # heap memory (73 KB: whole pages)
    assert weights.release(matrix.blocks)            # the file's mapping: its pages dropped, faulted back on read
    assert torch.equal(matrix.blocks, copy)
    assert not weights.release(copy)                 # not the mapping: left alone (dropping heap pages zeroes them)
    assert torch.equal(copy, matrix.blocks) and bool(copy.any())


# ---------------------------------------------------------------- sliding windows (Gemma3)


def _chain_and_tree(lm, prompt):
    """(chain rows, the same rows inside a branching tree) past a sliding window: [5, 6] as a chain, then
    [5, 8, 6, 9] with parents [-1, -1, 0, 0] (rows 0 and 2 are the chain's)."""
    rows = []
    for tokens, parents in (([5, 6], None), ([5, 8, 6, 9], [-1, -1, 0, 0])):
        cache = lm.new_cache()
        lm.forward(cache, prompt)
        rows.append(lm.forward(cache, tokens, parents=parents).logits)
    return rows[0], rows[1][[0, 2]]


@pytest.mark.parametrize("runner", ["quantized-q8", "native"])
def test_a_tree_past_the_sliding_window_sees_what_greedy_sees(monkeypatch, runner):
    """A branching tree's node at position p sees the keys greedy sees at p (HF's window by position), on HF's
    modules (which take a custom mask as it is, so the base runner windows it) and on the native forward. Negative
    controls: without the base runner's window the tree rows change; without the native forward's, every row."""
    lm = tiny_gguf_lm("gemma3", "Q4_K", seed=5, runner=runner)
    assert lm.runner == runner and lm.model.config.sliding_window == 8
    prompt = PROMPT[:30]
    chain, tree = _chain_and_tree(lm, prompt)
    assert torch.equal(chain, tree)
    from multidraft.models import kv_cache
    from multidraft.models.runners import base
    if runner == "native":
        monkeypatch.setattr(native, "windowed", lambda allowed, positions, window: allowed)
    else:
        monkeypatch.setattr(base, "sliding_window", lambda model: None)
    causal = torch.ones(2, 32, dtype=torch.bool).tril(30)
    assert kv_cache.windowed(causal, torch.tensor([30, 31]), 8).sum(1).tolist() == [8, 8]    # 23..30 and 24..31
    unwindowed_chain, unwindowed_tree = _chain_and_tree(lm, prompt)
    if runner == "native":                  # both rows lose the window: they change
        assert not torch.equal(unwindowed_chain, chain) and not torch.equal(unwindowed_tree, tree)
    else:                                   # HF windows the chain itself, the tree's custom mask no longer
        assert torch.equal(unwindowed_chain, chain) and not torch.equal(unwindowed_tree, tree)


def test_gemma3_runs_native_and_on_the_engine_with_masks_by_kind_of_layer():
    from multidraft.models.packed import unsupported_reason as engine_reason

    ours = tiny_gguf_lm("gemma3", "Q4_K", seed=3, runner="native")
    assert ours.runner == "native" and native.unsupported_reason(ours.model) is None
    assert engine_reason(ours) is None
    with pytest.raises(ValueError, match="masks by kind of layer"):
        ours.runner_object.native.run(KVArena(64), torch.tensor([3]), None, torch.tensor([0]),
                                      torch.ones(1, 64, dtype=torch.bool))
    config = ours.model.config
    for field, value, why in (("final_logit_softcapping", 30.0, "soft-caps"), ("hidden_activation", "silu", "silu")):
        previous = getattr(config, field)
        setattr(config, field, value)
        try:
            assert why in native.unsupported_reason(ours.model)
        finally:
            setattr(config, field, previous)


@pytest.fixture(scope="module")
def gemma_pair():
    from multidraft.errors import ModelNotFoundError
    from multidraft.models.loader import load_model
    try:
        return load_model("gemma3-270m", runner="native"), load_model("gemma3-270m", runner="quantized-q8")
    except ModelNotFoundError as exc:
        pytest.skip(f"Gemma-3-270M not pulled (`multidraft models pull gemma3-270m`): {exc}")


@pytest.mark.heavy
def test_gemma3_270m_native_is_quantized_q8_bits_past_its_window(gemma_pair):
    """The real Gemma3 (window 512): a 600-token prompt, a step, a verify and a branching tree, native == HF's
    modules bit for bit, and its tree rows == its chain rows."""
    ours, reference = gemma_pair
    assert ours.runner == "native"
    prompt = ours.tokenizer("The history of the Roman Empire " * 120)["input_ids"][:600]
    got = []
    for lm in (ours, reference):
        cache = lm.new_cache()
        got.append([lm.forward(cache, prompt, logits_rows=slice(-1, None)).logits, lm.forward(cache, [5]).logits,
                    lm.forward(cache, [5, 6, 7]).logits,
                    lm.forward(cache, [4, 50, 17, 51], parents=[-1, -1, 0, 0]).logits])
    assert all(torch.equal(a, b) for a, b in zip(*got))
    assert torch.equal(torch.stack(_chain_and_tree(ours, prompt)[0:1]), torch.stack(_chain_and_tree(ours, prompt)[1:]))


def _prefill_and_next(lm, **capture):
    """A 70-row prefill (logits of rows 10..39, which cross chunk edges, with captures) and the next forward."""
    cache = lm.new_cache()
    first = lm.forward(cache, PROMPT, logits_rows=slice(10, 40), **capture)
    return first, lm.forward(cache, [4, 50, 17]).logits


def _runner_forward_rows(lm, monkeypatch) -> list:
    """The rows of each forward lm's runner gets from now on (a list the spy appends to)."""
    calls = []
    real_forward = lm.runner_object.forward
    monkeypatch.setattr(lm.runner_object, "forward",
                        lambda *args: calls.append(args[2].shape[1]) or real_forward(*args))
    return calls


@pytest.mark.parametrize("arch,runner", [("qwen2", "native"), ("qwen2", "quantized-q8"), ("gemma3", "native")])
def test_a_long_prefill_in_chunks_keeps_every_bit_and_capture(monkeypatch, arch, runner):
    """A chain longer than PREFILL_CHUNK runs as chunks (counted at the runner) with the one forward's logits, hidden
    states, attention rows and cache; on HF's modules (quantized-q8) too, whose empty logits rows take another path,
    and with Gemma3's sliding window of 8 keys across the chunks' edges."""
    from multidraft.models import runner as lm_module

    lm = tiny_gguf_lm(arch, "Q4_K", seed=3, runner=runner)
    assert lm.runner == runner and lm.capabilities.prefix_reusable
    capture = {"hidden_layer": 2, "attention_heads": [(0, 1), (1, 3)]}
    expected, expected_next = _prefill_and_next(lm, **capture)
    calls = _runner_forward_rows(lm, monkeypatch)
    monkeypatch.setattr(lm_module, "PREFILL_CHUNK", 16)
    got, got_next = _prefill_and_next(lm, **capture)
    assert calls == [16, 16, 16, 16, 6, 3]                  # the prompt in five chunks, then the next forward
    assert got.logits.shape == (30, expected.logits.shape[1])
    assert torch.equal(got.logits, expected.logits) and torch.equal(got_next, expected_next)
    assert torch.equal(got.hidden, expected.hidden)
    for row in (0, 15, 16, 69):
        assert torch.equal(got.attention.weights(row, range(row + 1)), expected.attention.weights(row, range(row + 1)))
    every_row = lm.forward(lm.new_cache(), PROMPT).logits  # every row's logits: each chunk gives its own
    monkeypatch.setattr(lm_module, "PREFILL_CHUNK", 10 ** 6)
    assert every_row.shape[0] == len(PROMPT) and torch.equal(every_row, lm.forward(lm.new_cache(), PROMPT).logits)


def test_a_long_prefill_stays_one_forward_where_chunks_would_change_bits(monkeypatch):
    """F16 matrices keep fp32 activations, whose long prefills take a dense GEMM (not prefix-reusable): one forward."""
    from multidraft.models import runner as lm_module

    with pytest.warns(RuntimeWarning, match="change nothing"):
        lm = tiny_gguf_lm("llama", "F16", seed=3, runner="native")
    assert not lm.capabilities.prefix_reusable
    calls = _runner_forward_rows(lm, monkeypatch)
    monkeypatch.setattr(lm_module, "PREFILL_CHUNK", 16)
    lm.forward(lm.new_cache(), PROMPT)
    assert calls == [len(PROMPT)]


@pytest.mark.parametrize("arch,type_name", [("qwen2", "Q4_K"), ("qwen2", "Q6_K"), ("llama", "Q8_0"),
                                            ("llama", "Q5_K"), ("qwen2", "Q4_0")])
def test_the_tiny_gguf_models_look_at_every_cached_key(monkeypatch, arch, type_name):
    """The test models must not attend one-hot: a key of one early position nudged by 0.5 in every layer changes the
    next token's logits. (Random blocks once gave weights 20-100x their nominal size; then a wrong key or position left
    the logits bit-identical, and tests guarding keys or positions could not fail.)"""
    lm = tiny_gguf_lm(arch, type_name, seed=5)
    lm.runner_object.native.fuse = False            # the step-by-step layer, which stores keys with _rotary_store
    prompt = PROMPT[:40]
    expected = lm.forward(lm.new_cache(), prompt).logits[-1].clone()
    store = native._rotary_store

    def nudged_store(q, k, v, cos, signed_sin, keys, values, start):
        query = store(q, k, v, cos, signed_sin, keys, values, start)
        keys[:, :, 5] += 0.5
        return query

    monkeypatch.setattr(native, "_rotary_store", nudged_store)
    changed = lm.forward(lm.new_cache(), prompt).logits[-1]
    assert float((changed - expected).abs().max()) > 1e-3 * float(expected.abs().max())
