"""The quantized runner: GGUF block decoding, batch-invariant kernels, and exactness of every lossless method.

Exactness is by construction (every part of a forward is batch-invariant), so the tests check the construction
bit for bit: a row's output is the same alone and among others, for the linears of every block format, for
attention, and for the whole model on chains and trees; then that the lossless methods give greedy's tokens.
"""

import hashlib
import re
import warnings

import gguf
import numpy as np
import pytest
import torch

from multidraft.models import gguf_kernels
from multidraft.models.kv_cache import KVCache
from tests.installed import load_smollm, require_quantized_kernels
from tests.tiny_gguf import FORMATS, random_blocks, set_iq1_d, temp_model_folder, write_tiny_gguf
from tests.tiny_models import make_tokenizer


@pytest.fixture(autouse=True, scope="module")
def kernels():
    """Every test here needs the kernels: without AVX2 a skip; a failed build (no compiler) under `make test` fails
    each test with what is missing, instead of the module's tests vanishing."""
    require_quantized_kernels()


BLOCK_FORMATS = [name for name in FORMATS if name not in ("F16", "BF16", "F32")]


@pytest.mark.parametrize("type_name", BLOCK_FORMATS)
def test_block_decoding_is_gguf_py_dequantize_bit_for_bit(type_name):
    rng = np.random.default_rng(0)
    raw = random_blocks(type_name, 9, 512, rng)
    expected = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[type_name]).reshape(9, 512)
    got = gguf_kernels.dequantize(torch.from_numpy(raw), int(gguf.GGMLQuantizationType[type_name]), 512)
    assert np.array_equal(got.numpy(), expected)


@pytest.mark.parametrize("type_name", FORMATS)
def test_linear_is_batch_invariant_and_is_the_matrix_product(type_name):
    from tests.tiny_gguf import encode_matrix

    rng = np.random.default_rng(1)
    data, raw_dtype, exact = encode_matrix(torch.empty(37, 512), type_name, rng, 0.1)
    type_id = int(raw_dtype) if raw_dtype is not None else {"F32": 0, "F16": 1}[type_name]
    blocks = torch.from_numpy(np.ascontiguousarray(data).view(np.uint8).reshape(37, -1).copy())
    x = torch.randn(20, 512)
    full = gguf_kernels.linear(x, blocks, type_id, 512)
    torch.testing.assert_close(full, x @ exact.T, rtol=1e-4, atol=1e-4 * float(exact.abs().max()))
    for rows in (1, 2, 3, 7, 16, 20):                 # any row count, any position: the same bits
        part = gguf_kernels.linear(x[:rows], blocks, type_id, 512)
        assert torch.equal(part, full[:rows])
    assert torch.equal(gguf_kernels.linear(x[13:14], blocks, type_id, 512)[0], full[13])


def test_attention_matches_softmax_and_each_row_only_sees_its_keys():
    torch.manual_seed(0)
    heads, kv_heads, keys, rows, dim = 4, 2, 11, 5, 64
    q = torch.randn(heads, rows, dim)
    k, v = torch.randn(kv_heads, keys, dim), torch.randn(kv_heads, keys, dim)
    visible = torch.rand(rows, keys) < 0.6
    visible[:, 0] = True
    out = gguf_kernels.attention(q, k, v, visible, 0.125)
    for t in range(rows):
        for h in range(heads):
            seen = visible[t].nonzero()[:, 0]
            probs = torch.softmax(q[h, t] @ k[h // 2, seen].T * 0.125, dim=-1)
            torch.testing.assert_close(out[t, h], probs @ v[h // 2, seen], rtol=1e-5, atol=1e-5)
        # the same row alone, given only the keys it sees: the same bits
        seen = visible[t].nonzero()[:, 0]
        alone = gguf_kernels.attention(q[:, t:t + 1], k[:, seen], v[:, seen], torch.ones(1, len(seen), dtype=torch.bool), 0.125)
        assert torch.equal(alone[0], out[t])


def test_attention_mask_may_stop_before_the_cache_slots_but_not_past_them():
    """A cache hands over its spare slots: a mask narrower than the keys leaves the slots past it unseen, the bits of
    the same mask padded with False (the native forward passes masks as wide as the keys they show); a cache layer's
    (1, KVH, S, D) buffer is taken as it is. A mask wider than the keys is refused."""
    torch.manual_seed(1)
    q, k, v = torch.randn(6, 3, 64), torch.randn(2, 40, 64), torch.randn(2, 40, 64)
    visible = torch.rand(3, 29) < 0.7
    visible[:, 0] = True
    padded = torch.nn.functional.pad(visible, (0, 11))
    expected = gguf_kernels.attention(q, k, v, padded, 0.125)
    assert torch.equal(gguf_kernels.attention(q, k, v, visible, 0.125), expected)
    assert torch.equal(gguf_kernels.attention(q, k[None], v[None], visible, 0.125), expected)
    k[:, 29:] = float("nan")                            # what lies past the mask is never read into a result
    assert torch.equal(gguf_kernels.attention(q, k, v, visible, 0.125), expected)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        gguf_kernels.attention(q, k[:, :28], v[:, :28], visible, 0.125)


def test_attention_softmax_weights_match_softmax_at_every_key_count_and_nan_stays_nan():
    """The softmax numerators come from the kernel's own exp (fixed fp32 steps, no libm): the weights are softmax's
    to 1e-6 relative at every key count (the last, partial vector of 8 included), one key alone gets weight 1 exactly,
    and a NaN score gives NaN."""
    torch.manual_seed(1)
    keys = 37
    # small integers: every score is exact in fp32 whatever the summation order (torch's fp32 matmul sums in
    # another order on AVX-512 CPUs, 3e-6 relative away), so only the softmax itself is compared
    k = torch.randint(-2, 3, (1, keys, keys)).float()
    q = torch.randint(-1, 2, (1, 1, keys)).float()
    v = torch.eye(keys)[None]                                     # out = the normalized weights themselves
    for count in (1, 7, 8, 9, 17, keys):
        out = gguf_kernels.attention(q, k[:, :count], v[:, :count], torch.ones(1, count, dtype=torch.bool),
                                     0.25)[0, 0, :count]
        expected = torch.softmax((q[0, 0].double() @ k[0, :count].double().T) * 0.25, -1)
        torch.testing.assert_close(out.double(), expected, rtol=1e-6, atol=1e-12)
        if count == 1:
            assert out.item() == 1.0
    q_nan = q.clone()
    q_nan[0, 0, 0] = float("nan")
    assert torch.isnan(gguf_kernels.attention(q_nan, k, v, torch.ones(1, keys, dtype=torch.bool), 1.0)).all()


def test_attention_bits_do_not_depend_on_its_schedule():
    """Each KV head's keys are read in L1 chunks shared by its query heads (a job = consecutive (KV head, row, head)
    units: by default one per thread, cut where the rows' visible keys balance them; or a row of a share of the
    heads): every chunking and split gives the bits of one job per head over all keys at once, at head sizes with and
    without a tail of 8 lanes, with masked keys and a row that sees nothing. Chunks of 4 score each key alone,
    longer ones eight keys at a time (hsum8): the two reductions must give the same bits."""
    generator = torch.Generator().manual_seed(7)
    # (71, 1, ...): multi-query attention with more query heads on one KV head than a small buffer would hold
    for heads, kv_heads, rows, keys, dim in ((12, 2, 2, 150, 128), (6, 3, 3, 70, 36), (4, 4, 1, 9, 64),
                                             (71, 1, 2, 40, 16)):
        q = torch.randn(heads, rows, dim, generator=generator)
        k, v = torch.randn(kv_heads, keys, dim, generator=generator), torch.randn(kv_heads, keys, dim, generator=generator)
        visible = torch.rand(rows, keys, generator=generator) < 0.8
        visible[-1] = rows == 1                                 # a row that sees no key (when there are several)
        one_pass = gguf_kernels.attention_with(q, k, v, visible, 0.09, keys, heads // kv_heads)
        threads = torch.get_num_threads()
        try:
            for count in (1, 2, 3, 5):          # the default schedule: a job per thread, cut by the rows' keys
                torch.set_num_threads(count)
                assert torch.equal(gguf_kernels.attention(q, k, v, visible, 0.09), one_pass), count
                causal = torch.ones(rows, keys, dtype=torch.bool).tril(keys - rows)
                assert torch.equal(gguf_kernels.attention(q, k, v, causal, 0.09),
                                   gguf_kernels.attention_with(q, k, v, causal, 0.09, keys, 1)), count
        finally:
            torch.set_num_threads(threads)
        for chunk, parts in ((4, 1), (8, 2), (32, 1), (12, 3)):
            assert torch.equal(gguf_kernels.attention_with(q, k, v, visible, 0.09, chunk, parts), one_pass)


def test_attention_heads_at_once_give_one_head_at_a_times_bits():
    """Where AVX-512 is there the attention scores (two keys per zmm) and weighs up to four query heads of a KV head
    at once (each key loaded once for all): the same bits as one head at a time, at head sizes with and without
    64-lane blocks and tails of 8, head groups of 1 to 7 (four and the rest), every chunking and split, masked keys
    and a row that sees nothing."""
    if gguf_kernels.missing_flag("avx512-vnni"):
        pytest.skip(f"this CPU lacks {gguf_kernels.missing_flag('avx512-vnni')} (the heads-at-once loops run where "
                    "it has AVX-512)")
    generator = torch.Generator().manual_seed(8)
    before = gguf_kernels.set_attention_wide(True)
    try:
        for heads, kv_heads, rows, keys, dim in ((12, 2, 3, 150, 128), (9, 3, 2, 301, 64), (4, 1, 2, 77, 256),
                                                 (6, 3, 3, 70, 36), (8, 2, 1, 9, 80), (14, 2, 5, 33, 72),
                                                 (5, 1, 2, 41, 64), (2, 2, 4, 23, 64)):
            q = torch.randn(heads, rows, dim, generator=generator)
            k, v = (torch.randn(kv_heads, keys, dim, generator=generator) for _ in range(2))
            visible = torch.rand(rows, keys, generator=generator) < 0.8
            visible[-1] = rows == 1
            outputs = []
            for wide in (False, True):
                gguf_kernels.set_attention_wide(wide)
                outputs.append([gguf_kernels.attention(q, k, v, visible, 0.09)] + [
                    gguf_kernels.attention_with(q, k, v, visible, 0.09, chunk, parts)
                    for chunk, parts in ((4, 1), (8, 2), (32, 1), (12, 3))])
            for one_head, two_heads in zip(*outputs):
                assert torch.equal(one_head.view(torch.int32), two_heads.view(torch.int32)), (heads, kv_heads, dim)
    finally:
        gguf_kernels.set_attention_wide(before)


def _verify_masks(prefix: int, rows: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Masks of `rows` new tokens after `prefix` cached ones, as verifies and prefills give them: a chain (causal), a
    tree (each row its cache, a random subset of the rows before it, itself), a chain whose middle row sees nothing,
    a chain through a sliding window of 24 keys (each row its last 24: the rows' lists start apart), and rows that
    share no key (an engine's requests, each over its own region)."""
    keys = prefix + rows
    chain = torch.zeros(rows, keys, dtype=torch.bool)
    chain[:, :prefix] = True
    chain[:, prefix:] = torch.ones(rows, rows, dtype=torch.bool).tril()
    tree = chain.clone()
    tree[:, prefix:] &= torch.rand(rows, rows, generator=generator) < 0.5
    tree[:, prefix:] |= torch.eye(rows, dtype=torch.bool)
    blind = chain.clone()
    blind[rows // 2] = False
    position = torch.arange(keys)
    windowed = chain & (position[None, :] > prefix + torch.arange(rows)[:, None] - 24)
    length = max(1, keys // rows)           # the engine's packed rows: one request each, over its own arena region
    regions = (position[None, :] // length) == torch.arange(rows)[:, None]
    return [chain, tree, blind, windowed, regions]


def test_attention_rows_together_give_each_row_alones_bits():
    """The rows of a call share each chunk of keys (the keys every row sees first taken for all their query vectors at
    once, each row's own later keys for it alone, blocks of up to 8 rows): each row's outputs are the bits
    of that row alone, over caches of 0 to 300 keys, 1 to 17 rows (several blocks), chains, trees, a sliding window
    and a row that sees nothing, head sizes with and without a tail of 8 lanes and odd counts of query vectors, one
    head at a time and (where AVX-512 is there) the paired kernels, with every chunking and split."""
    generator = torch.Generator().manual_seed(9)
    paths = [False] if gguf_kernels.missing_flag("avx512-vnni") else [False, True]
    before = gguf_kernels.set_attention_wide(False)
    try:
        for heads, kv_heads, dim in ((12, 2, 128), (9, 3, 64), (5, 1, 72), (3, 3, 16)):
            for prefix, rows in ((0, 9), (5, 3), (37, 8), (300, 17), (64, 1)):
                q = torch.randn(heads, rows, dim, generator=generator)
                k, v = (torch.randn(kv_heads, prefix + rows + 3, dim, generator=generator) for _ in range(2))
                for visible in _verify_masks(prefix, rows, generator):
                    outputs = []
                    for wide in paths:
                        gguf_kernels.set_attention_wide(wide)
                        together = gguf_kernels.attention(q, k, v, visible, 0.09)
                        for t in range(rows):
                            alone = gguf_kernels.attention(q[:, t:t + 1], k, v, visible[t:t + 1], 0.09)
                            assert torch.equal(alone[0].view(torch.int32), together[t].view(torch.int32)), \
                                (heads, kv_heads, dim, prefix, rows, t, wide)
                        for chunk, parts in ((4, 1), (8, 2), (32, 3)):
                            assert torch.equal(gguf_kernels.attention_with(q, k, v, visible, 0.09, chunk, parts),
                                               together)
                        outputs.append(together)
                    assert all(torch.equal(out.view(torch.int32), outputs[0].view(torch.int32)) for out in outputs)
    finally:
        gguf_kernels.set_attention_wide(before)


# The digest of the attention's outputs on pinned_attention_outputs' inputs: the bits of its stated arithmetic (scores
# by 8 fp32 lanes and hsum's tree, the kernel's own exp, the softmax total added in key order, values in key order),
# the same on every CPU and path. A change of that arithmetic (another summation order, another exp) changes it;
# a faster schedule of the same arithmetic does not (the vectorized visible-key scan, maximum and interleaved totals
# of 2026-12-02 kept it, and so did four heads at once with two keys per zmm, later that day, and the rows of a call
# sharing each chunk of keys, with query vectors in pairs against broadcast keys, in the session after).
ATTENTION_DIGEST = "f4fbfcfefc8a3acf984b10258aa311a0979bc5a0fc53eeb7323d60c1f03daca5"


def _pinned_attention_digest() -> str:
    generator = torch.Generator().manual_seed(5)

    def values(*shape):            # exact in fp32 on every machine (torch's randn may differ between CPUs)
        return torch.randint(-2048, 2048, shape, generator=generator).float() / 1024

    outputs = []
    for heads, kv_heads, rows, keys, dim in ((12, 2, 3, 150, 128), (9, 3, 2, 301, 64), (4, 1, 2, 77, 256),
                                             (6, 3, 3, 70, 36)):
        q, k, v = values(heads, rows, dim), values(kv_heads, keys, dim), values(kv_heads, keys, dim)
        visible = torch.randint(0, 10, (rows, keys), generator=generator) < 7
        visible[:, :40] = True                              # a run of visible keys, then a mixed mask
        outputs.append(gguf_kernels.attention(q, k, v, visible, 0.09))
    return hashlib.sha256(b"".join(out.numpy().tobytes() for out in outputs)).hexdigest()


def test_attention_arithmetic_is_pinned_on_every_cpu_and_path():
    """The attention's bits are part of every runner's logits (a lossless method is exact against them, a prefix
    cache reuses them across machines): on fixed inputs they are one digest on every CPU, one head at a time and,
    where AVX-512 is there, up to four heads at once."""
    before = gguf_kernels.set_attention_wide(False)
    try:
        assert _pinned_attention_digest() == ATTENTION_DIGEST
        if not gguf_kernels.missing_flag("avx512-vnni"):
            gguf_kernels.set_attention_wide(True)
            assert _pinned_attention_digest() == ATTENTION_DIGEST
    finally:
        gguf_kernels.set_attention_wide(before)


def _tiny(arch, type_name, tie=False):
    from multidraft.models.quantized import load_quantized_model
    from multidraft.models.runner import LM

    folder = temp_model_folder(f"tiny-gguf-{arch}-{type_name}-")
    path = write_tiny_gguf(folder, arch, type_name, seed=3, tie=tie)
    return LM(load_quantized_model(folder, path), make_tokenizer(), name=f"tiny-{arch}-{type_name}",
              runner="quantized"), folder


def _q8_reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """llama.cpp's 8-bit activations, written plainly: per row and 256 values, q = round-half-even(x * (127 / max|x|))
    and d = max|x| / 127 in fp32; then the exact product of q * d with the weights (float64)."""
    rows, width = x.shape
    groups = x.reshape(rows, width // 256, 256)
    top = groups.abs().amax(-1, keepdim=True)
    q = torch.round(groups * (torch.tensor(127.0) / top)).clamp(-127, 127)
    d = top / torch.tensor(127.0)
    return ((q * d).reshape(rows, width).double() @ weight.double().T).float()


@pytest.mark.parametrize("type_name", ["Q4_K", "Q5_K", "Q6_K"])
def test_q8_linear_is_llama_cpp_arithmetic_and_batch_invariant(type_name):
    rng = np.random.default_rng(5)
    raw = random_blocks(type_name, 41, 768, rng, scale=0.05)
    type_id = int(gguf.GGMLQuantizationType[type_name])
    blocks = torch.from_numpy(raw)
    weight = gguf_kernels.dequantize(blocks, type_id, 768)
    x = torch.randn(20, 768)
    x[3] *= 1e-3                                            # rows of very different sizes: each has its own scales
    full = gguf_kernels.linear_q8(x, blocks, type_id, 768)
    expected = _q8_reference(x, weight)
    for row in range(20):                                   # integer sums: only the fp32 scaling rounds
        assert float((full[row] - expected[row]).abs().max()) <= 1e-5 * float(expected[row].abs().max())
    fp32 = x @ weight.T                                     # and 8-bit activations stay close to fp32 ones
    assert float((full - fp32).abs().max()) <= 0.03 * float(fp32.abs().max())
    for rows in (1, 2, 3, 5, 8, 16, 20):
        assert torch.equal(gguf_kernels.linear_q8(x[:rows], blocks, type_id, 768), full[:rows])
    assert torch.equal(gguf_kernels.linear_q8(x[11:12], blocks, type_id, 768)[0], full[11])
    zero = gguf_kernels.linear_q8(torch.zeros(2, 768), blocks, type_id, 768)   # max|x| = 0: no division by zero
    assert torch.equal(zero, torch.zeros(2, 41))
    poisoned = x[:3].clone()
    poisoned[1, 300] = float("nan")                          # NaN stays visible (the runner's finite check)
    out = gguf_kernels.linear_q8(poisoned, blocks, type_id, 768)
    assert torch.isnan(out[1]).all() and torch.equal(out[0], full[0]) and torch.equal(out[2], full[2])


@pytest.mark.parametrize("type_name", ["Q4_K", "Q5_K", "Q6_K"])
def test_q8_linear_gives_a_row_the_same_bits_in_any_group_slice_and_thread(type_name):
    """The kernel takes input rows in balanced groups (of up to 4) over slices of 64 weight rows split across threads:
    a row's outputs must not depend on the group size, its position in the group, the slice or the thread count.
    N = 131 is not a multiple of the slice or of the thread split; every M from 1 to 40 at two offsets."""
    rng = np.random.default_rng(11)
    width, outputs = 768, 131
    blocks = torch.from_numpy(random_blocks(type_name, outputs, width, rng, scale=0.05))
    type_id = int(gguf.GGMLQuantizationType[type_name])
    x = torch.randn(50, width) * torch.logspace(-2, 1, 50).unsqueeze(1)     # each row its own scales
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = torch.cat([gguf_kernels.linear_q8(x[r:r + 1], blocks, type_id, width) for r in range(50)])
        reference = _q8_reference(x, gguf_kernels.dequantize(blocks, type_id, width))
        tolerance = 1e-5 * reference.abs().amax(1, keepdim=True)
        assert bool(((alone - reference).abs() <= tolerance).all())
        for count in (1, 2):
            torch.set_num_threads(count)
            for rows in range(1, 41):
                for start in (0, 50 - rows):
                    got = gguf_kernels.linear_q8(x[start:start + rows], blocks, type_id, width)
                    assert torch.equal(got, alone[start:start + rows]), (count, rows, start)
    finally:
        torch.set_num_threads(threads)


def test_q8_linear_refuses_other_formats():
    raw = torch.randn(4, 256).half().view(torch.uint8)                     # F16: no 8-bit kernel
    with pytest.raises(RuntimeError, match="Q4_K"):
        gguf_kernels.linear_q8(torch.randn(1, 256), raw, 1, 256)


@pytest.mark.parametrize("arch,type_name", [("llama", "Q4_1"), ("qwen2", "Q4_K"), ("qwen2", "Q6_K"),
                                            ("llama", "Q8_0"), ("qwen2", "Q5_0"), ("llama", "BF16")])
def test_tiny_model_equals_fp32_eager_on_the_same_values(arch, type_name):
    """The HF folder holds the blocks' exact values in fp32: logits agree up to summation order (Llama's q/k rows
    come back from llama.cpp's rotary order)."""
    from transformers import AutoModelForCausalLM

    lm, folder = _tiny(arch, type_name, tie=type_name == "Q8_0")
    assert lm.runner == "quantized"
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    ids = torch.tensor([[1, 5, 9, 3, 7, 22, 40, 11, 8]])
    with torch.inference_mode():
        ours, theirs = lm.model(ids).logits[0], reference(ids).logits[0]
    assert float((ours - theirs).abs().max()) <= 1e-4 * float(theirs.abs().max())


@pytest.mark.parametrize("arch,type_name", [("qwen2", "Q4_K"), ("llama", "Q4_1")])
def test_forward_is_batch_invariant_on_chains_and_trees(arch, type_name):
    lm, _ = _tiny(arch, type_name)
    prompt = [1, 5, 9, 3, 7, 22]
    alone = KVCache()
    lm.forward(alone, prompt)
    steps = [4, 17, 30, 8, 12, 44, 9, 2, 60, 33, 21, 5, 6, 7, 18, 19, 25]        # 17 tokens: past 16
    single = [lm.forward(alone, [token]).logits[0] for token in steps]
    chain = KVCache()
    lm.forward(chain, prompt)
    together = lm.forward(chain, steps).logits
    assert all(torch.equal(together[i], single[i]) for i in range(len(steps)))
    tree_cache = KVCache()
    lm.forward(tree_cache, prompt)
    tree = lm.forward(tree_cache, [4, 50, 17, 51, 30], parents=[-1, -1, 0, 0, 2]).logits
    assert torch.equal(tree[0], single[0]) and torch.equal(tree[2], single[1]) and torch.equal(tree[4], single[2])


LOSSLESS = ["pld", "pld_plus", "suffix"]


@pytest.mark.parametrize("type_name", ["Q4_K", "Q4_1"])
def test_lossless_methods_give_greedy_tokens(type_name):
    import multidraft

    lm, _ = _tiny("qwen2" if type_name == "Q4_K" else "llama", type_name)
    prompts = ["the cat sat on the mat and the cat sat on", "def x ( y ) : return x ( y ) + 1 if x",
               "a dog ran on the mat . a dog ran"]
    for prompt in prompts:
        greedy = multidraft.generate(lm, prompt, method="greedy", max_new_tokens=40, temperature=0).token_ids
        for method in LOSSLESS:
            got = multidraft.generate(lm, prompt, method=method, max_new_tokens=40, temperature=0).token_ids
            assert got == greedy, (method, prompt)


def test_speculative_with_a_quantized_draft_gives_greedy_tokens():
    import multidraft

    target, _ = _tiny("qwen2", "Q4_K")
    draft, _ = _tiny("qwen2", "Q8_0")
    greedy = multidraft.generate(target, "the cat sat on", method="greedy", max_new_tokens=30, temperature=0).token_ids
    got = multidraft.generate(target, "the cat sat on", method="speculative", draft_model=draft, max_new_tokens=30,
                              temperature=0).token_ids
    assert got == greedy


def test_q8_runner_is_batch_invariant_prefill_included_and_lossless():
    import multidraft

    lm, _ = _tiny("qwen2", "Q4_K")
    fp32_logits = lm.forward(KVCache(), [1, 5, 9, 3]).logits
    assert lm.use_runner("quantized-q8") == "quantized-q8"
    q8_logits = lm.forward(KVCache(), [1, 5, 9, 3]).logits
    assert not torch.equal(q8_logits, fp32_logits)
    assert float((q8_logits - fp32_logits).abs().max()) <= 0.05 * float(fp32_logits.abs().max())
    prompt = [(7 * i + 3) % 60 + 1 for i in range(80)]      # longer than PREFILL_GEMM_ROWS: no dense GEMM in q8
    whole = lm.forward(KVCache(), prompt).logits
    pieces = KVCache()
    lm.forward(pieces, prompt[:10])
    single = [lm.forward(pieces, [token]).logits[0] for token in prompt[10:]]
    assert all(torch.equal(whole[10 + i], row) for i, row in enumerate(single))
    tree_cache = KVCache()
    lm.forward(tree_cache, prompt[:10])
    tree = lm.forward(tree_cache, [prompt[10], 50, prompt[11], 51], parents=[-1, -1, 0, 0]).logits
    assert torch.equal(tree[0], single[0]) and torch.equal(tree[2], single[1])
    for text in ["the cat sat on the mat and the cat sat on", "a dog ran on the mat . a dog ran"]:
        greedy = multidraft.generate(lm, text, method="greedy", max_new_tokens=40, temperature=0).token_ids
        for method in LOSSLESS:
            assert multidraft.generate(lm, text, method=method, max_new_tokens=40, temperature=0).token_ids == greedy
    assert lm.use_runner("quantized") == "quantized"          # and back: the fp32 model's very bits
    assert torch.equal(lm.forward(KVCache(), [1, 5, 9, 3]).logits, fp32_logits)


def test_auto_activations_are_q8_where_a_matrix_has_an_8_bit_kernel():
    from multidraft.models import quantized

    for type_name, runner in (("Q4_K", "quantized-q8"), ("Q5_K", "quantized-q8"), ("Q6_K", "quantized-q8"),
                              ("Q8_0", "quantized-q8"), ("Q4_1", "quantized-q8"), ("BF16", "quantized")):
        folder = temp_model_folder(f"tiny-gguf-auto-{type_name}-")
        path = write_tiny_gguf(folder, "qwen2", type_name, seed=3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")                 # BF16: fp32 activations, silently (nothing to warn about)
            model = quantized.load_quantized_model(folder, path, activations="auto")
        assert quantized.runner_name(model) == runner, type_name


@pytest.mark.parametrize("type_name", ["IQ1_S"])
def test_formats_without_a_kernel_run_in_fp32_and_the_load_says_what_that_costs(type_name, monkeypatch):
    """An IQ1_S GGUF whose blocks cannot become Q6_K ones (a d / 8 that is not an fp16, stood in for here: every
    matrix) loads with its matrices expanded to fp32, computes the model, and says so once: which tensors, the
    memory it took, what runs on the kernels instead (it used to be silent)."""
    from multidraft.models import gguf_weights, quantized

    monkeypatch.setitem(gguf_weights.CONVERTIBLE, 19, lambda rows: False)
    folder = temp_model_folder(f"tiny-gguf-expanded-{type_name}-")
    path = write_tiny_gguf(folder, "qwen2", type_name, seed=5)
    with pytest.warns(RuntimeWarning) as caught:
        model = quantized.load_quantized_model(folder, path, activations="auto")
    messages = [str(w.message) for w in caught if "expanded to fp32" in str(w.message)]
    assert len(messages) == 1, [str(w.message) for w in caught]
    assert re.search(rf"16 tensors of model.gguf \({type_name} x 16\) .* at load \(\d+\.\d MB in place of "
                     rf"\d+\.\d MB\).*\(Q2_K, Q3_K_M, Q4_K_M", messages[0]), messages[0]
    assert quantized.runner_name(model) == "quantized"
    _assert_logits_are_the_eager_folders(model, folder)


def _assert_logits_are_the_eager_folders(model, folder):
    """The model's logits are the fp32 eager HF model's from `folder` (which holds the blocks' exact values), up to
    summation order."""
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    ids = torch.tensor([[1, 5, 9, 3, 7, 22, 40, 11, 8]])
    with torch.inference_mode():
        ours, theirs = model(ids).logits[0], reference(ids).logits[0]
    assert float((ours - theirs).abs().max()) <= 1e-4 * float(theirs.abs().max())


NUMPY_CONVERSIONS = {"Q3_K": "q3_k_as_q6_k", "IQ3_S": "iq3_s_as_q6_k", "IQ1_S": "iq1_s_as_q6_k",
                     "IQ1_M": "iq1_m_as_q6_k", "TQ1_0": "tq1_0_as_q6_k", "TQ2_0": "tq2_0_as_q6_k"}


def _extreme_blocks(type_name, raw):
    """Some rows' first block set to a format's extremes (raw: 48 rows of random blocks)."""
    if type_name == "Q3_K":
        raw[:4, :32] = 0                                # every high bit clear (q = low - 4) in some rows' first block
        raw[4:8, :32] = 255                             # and every one set
    if type_name == "IQ3_S":                            # in some rows' first block:
        raw[:4, 106:110] = 255                          # every scale 31 (s = 15)
        raw[4:8, 74:106] = 255                          # every value negative
        raw[8:12, 2:74] = 255                           # every grid index 511
    if type_name == "IQ1_S":
        raw[:4, 34:50:2] = 0                            # qh: octets 0, 1's index bits 8-10 zero, octet 3's 7,
        raw[:4, 35:50:2] = 0xFF                         # s = 7, every delta negative
        raw[4:8, 2:34] = 255                            # every index's low bits 255
        raw[8:12, 35:50:2] &= 0x0F                      # s = 0, delta positive, index bits 8-10 as random
    if type_name == "IQ1_M":
        raw[:4, 32:48] = 0xFF                           # every index's high bits 7, every delta negative
        raw[4:8, 32:48] = 0x00                          # high bits 0, every delta positive
        raw[8:12, 48:56:2] = 0xFF                       # the low bytes of the scale words: s = 7 where they reach
    if type_name in ("TQ1_0", "TQ2_0"):
        end = 52 if type_name == "TQ1_0" else 64
        raw[:4, :end] = 255                             # every byte of the values at its largest (TQ2_0: the
        raw[4:8, :end] = 0                              # unused 3 in every 2 bits), its smallest, and one more
        raw[8:12, :end] = 0xAA if type_name == "TQ2_0" else 242


@pytest.mark.parametrize("converter", ["load's", "numpy's"])
@pytest.mark.parametrize("type_name,target", [("Q3_K", "Q6_K"), ("IQ3_S", "Q6_K"), ("IQ1_S", "Q6_K"),
                                              ("IQ1_M", "Q6_K"), ("TQ1_0", "Q6_K"), ("TQ2_0", "Q6_K")])
def test_lossless_conversions_keep_every_value_bit_for_bit(type_name, target, converter):
    """The conversion a load runs (the kernels', loaded by this module's fixture) and numpy's reference."""
    from multidraft.models import gguf_convert
    from multidraft.models.gguf_weights import CONVERSIONS

    qtype, target_type = gguf.GGMLQuantizationType[type_name], gguf.GGMLQuantizationType[target]
    convert, converted_type = CONVERSIONS[int(qtype)]
    assert converted_type == int(target_type)
    if converter == "numpy's":
        convert = getattr(gguf_convert, NUMPY_CONVERSIONS[type_name])
    rng = np.random.default_rng(21)
    raw = random_blocks(type_name, 48, 2048, rng, scale=0.5)
    _extreme_blocks(type_name, raw)
    converted = convert(raw)
    per_block = gguf.GGML_QUANT_SIZES[target_type][1] * 2048 // gguf.GGML_QUANT_SIZES[target_type][0]
    assert converted.shape == (48, per_block)
    expected = gguf.quants.dequantize(raw, qtype)
    assert np.array_equal(expected.view(np.uint32), gguf.quants.dequantize(converted, target_type).view(np.uint32))
    ours = gguf_kernels.dequantize(torch.from_numpy(converted), int(target_type), 2048).numpy()
    assert np.array_equal(ours, expected)


def test_an_iq1_matrix_converts_only_where_every_d_over_8_is_an_fp16():
    """IQ1's Q6_K d is d / 8: exact for every fp16 d of 2^-11 and up (and zero, infinities), for smaller ones only
    where the bits that fall off are zero (2^-12, 2^-24 * 8); one block that is not keeps its matrix fp32, its
    values as they are (gguf-py's)."""
    from multidraft.models import gguf_convert, gguf_weights

    rng = np.random.default_rng(3)
    for type_name, type_id in (("IQ1_S", 19), ("IQ1_M", 29)):
        raw = random_blocks(type_name, 4, 512, rng, scale=0.5)
        assert gguf_convert.iq1_d_exact(raw, type_id)
        for d, exact in ((2.0 ** -11, True), (-1.0, True), (0.0, True), (float("inf"), True), (2.0 ** -12, True),
                         (2.0 ** -21, True), (2.0 ** -14 + 2.0 ** -24, False), (2.0 ** -24, False),
                         (float("nan"), False)):
            first = raw.reshape(-1, raw.shape[1] // 2)[:1]              # row 0's first block of two
            set_iq1_d(first, type_name, np.float16([d]).view(np.uint16))
            assert gguf_convert.iq1_d_exact(raw, type_id) == exact, (type_name, d)
            if exact and np.isfinite(d):
                expected = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[type_name])
                converted = gguf_weights.CONVERSIONS[type_id][0](raw)
                got = gguf.quants.dequantize(converted, gguf.GGMLQuantizationType.Q6_K)
                assert np.array_equal(expected.view(np.uint32), got.view(np.uint32)), (type_name, d)


@pytest.mark.parametrize("type_name", ["Q3_K", "IQ3_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0"])
def test_the_kernels_conversions_are_numpys_byte_for_byte(type_name):
    """Every byte random (any bytes are a valid block of these formats; IQ1's d / 8 rounded as numpy rounds it, NaN
    and infinities too), odd shapes, rows split over threads."""
    from multidraft.models import gguf_convert

    type_id, reference = int(gguf.GGMLQuantizationType[type_name]), getattr(gguf_convert, NUMPY_CONVERSIONS[type_name])
    size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]][1]
    rng = np.random.default_rng(5)
    for rows, blocks in ((1, 1), (3, 7), (1000, 5)):
        raw = rng.integers(0, 256, (rows, size * blocks), dtype=np.uint8)
        ours = gguf_kernels.as_q6_k(torch.from_numpy(raw), type_id).numpy()
        assert ours.shape == (rows, 210 * blocks) and np.array_equal(ours, reference(raw))


def _loaded_without_warnings(prefix, type_name, seed):
    """(the quantized runner's model of a tiny qwen2 GGUF in `type_name`, its folder), loaded with every warning an
    error."""
    from multidraft.models import quantized

    folder = temp_model_folder(prefix)
    path = write_tiny_gguf(folder, "qwen2", type_name, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return quantized.load_quantized_model(folder, path, activations="auto"), folder


@pytest.mark.parametrize("type_name", ["Q3_K", "IQ3_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0"])
def test_a_converted_format_runs_on_the_8_bit_kernels_silently_and_computes_the_model(type_name):
    """Q3_K (Q3_K_M's main format), IQ3_S (IQ3_M's), IQ1_S, IQ1_M and the ternary TQ1_0, TQ2_0 as Q6_K blocks of the
    same values: the 8-bit runner, no fp32 expansion (so no warning), the fp32 eager model's logits from the HF folder
    of the exact values."""
    from multidraft.models import quantized

    model, folder = _loaded_without_warnings(f"tiny-gguf-converted-{type_name}-", type_name, seed=6)
    assert quantized.runner_name(model) == "quantized-q8"
    assert model.gguf_weights.converted == {type_name: 16} and not model.gguf_weights.expanded
    # where a packed copy serves the 8-bit kernels (VNNI / AMX paths), the converted plain copy is freed, and made
    # again from the file when read: the same logits either way
    linears = [m.gguf_matrix for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert all(("blocks" in m.__dict__) == (m.packed is None) for m in linears)
    ids = torch.tensor([[1, 5, 9, 3, 7, 22, 40, 11, 8]])
    with torch.inference_mode():
        dropped = model(ids).logits
        assert all(m.blocks.shape[0] == m.rows for m in linears)          # made again
        assert torch.equal(model(ids).logits, dropped)
    layout = {"IQ3_S": (gguf_kernels.IQ4_XS_X8, 148), "IQ1_S": (gguf_kernels.IQ4_XS_X8, 148),
              "Q3_K": (gguf_kernels.Q3_K_X8, 164), "TQ1_0": (gguf_kernels.Q3_K_X8, 164),
              "TQ2_0": (gguf_kernels.Q3_K_X8, 164)}.get(type_name)
    generator = torch.Generator().manual_seed(6)       # packed in layouts of their own, at their Q6_K blocks' bits
    for m in linears:                                  # (IQ1_M: in Q6_K's, where this path packs it)
        if layout is not None:
            assert (m.packed_type, m.packed.shape[1]) == (layout[0], m.width // 256 * layout[1])
        else:
            assert m.packed_type == (None if gguf_kernels.q6_k_layout() == 14 else gguf_kernels.q6_k_layout())
        x = torch.randn(3, m.width, generator=generator)
        assert torch.equal(m.linear(x, q8=True), gguf_kernels.linear_q8(x, m.blocks, 14, m.width))
    quantized.set_activations(model, "fp32")             # the exact values' products, as the eager model's
    _assert_logits_are_the_eager_folders(model, folder)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_a_converted_format_is_converted_one_matrix_at_a_time_and_its_embedding_rows_when_read(arch, monkeypatch):
    """Q3_K's Q6_K copies are made when read, not when the model is built: the load converts a matrix, packs it and
    frees the copy before the next one (at most one copy alive: a 7B's Q3_K_M would otherwise hold gigabytes of
    them), and the embedding (and Llama's q / k, rows reordered) keep none: a lookup converts its rows alone, the
    same values as the whole matrix's."""
    from multidraft.models import gguf_weights, quantized

    built, alive = [], []
    real_made_when_read = gguf_weights.BlockMatrix.made_when_read.__func__

    def made_when_read(cls, rows, type_id, width, name, rebuild, source_type):
        def counted(selected=None):
            if selected is None:
                alive.append(sum("blocks" in m.__dict__ for m in built))
            return rebuild(selected)
        built.append(real_made_when_read(cls, rows, type_id, width, name, counted, source_type))
        return built[-1]

    monkeypatch.setattr(gguf_weights.BlockMatrix, "made_when_read", classmethod(made_when_read))
    folder = temp_model_folder(f"tiny-gguf-lazy-{arch}-")
    model = quantized.load_quantized_model(folder, write_tiny_gguf(folder, arch, "Q3_K", seed=7), activations="q8")
    linears = [m.gguf_matrix for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert all(m.packed is not None and "blocks" not in m.__dict__ for m in linears)
    assert len(alive) == len(linears) and max(alive) == 0              # each converted with no other copy alive
    embedding = model.get_input_embeddings().gguf_matrix
    ids = torch.tensor([[3, 0, 17, 3, 63, 40]])
    with torch.inference_mode():
        logits = model(ids).logits
    assert "blocks" not in embedding.__dict__ and len(alive) == len(linears)
    for outside in (-1, embedding.rows):
        with pytest.raises(IndexError, match="row indices"):
            embedding.dequantize(torch.tensor([0, outside]))
    rows = embedding.dequantize(ids.reshape(-1))
    assert torch.equal(rows, embedding.dequantize()[ids.reshape(-1)])  # now made whole, the same bits
    assert "blocks" in embedding.__dict__
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, logits)


@pytest.mark.parametrize("type_name", ["IQ4_XS", "Q2_K", "IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ4_NL"])
def test_formats_with_kernels_of_their_own_run_on_them_silently_and_compute_the_model(type_name):
    """IQ4_XS, Q2_K, IQ3_XXS, IQ2_XXS / XS / S and IQ4_NL on kernels of their own: the 8-bit runner, nothing converted
    or expanded, so no warning; with fp32 activations the fp32 eager model's logits of the exact values."""
    from multidraft.models import quantized

    model, folder = _loaded_without_warnings(f"tiny-gguf-own-kernels-{type_name}-", type_name, seed=7)
    assert quantized.runner_name(model) == "quantized-q8"
    assert not model.gguf_weights.converted and not model.gguf_weights.expanded
    linears = [m.gguf_matrix for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert {m.type_name for m in linears} == {type_name} and all(m.has_q8_kernel for m in linears)
    quantized.set_activations(model, "fp32")
    _assert_logits_are_the_eager_folders(model, folder)


def test_runner_cannot_be_switched_and_says_how():
    from multidraft.errors import InvalidOptionError

    lm, _ = _tiny("qwen2", "Q4_K")
    assert lm.use_runner("auto") == "quantized"
    with pytest.raises(InvalidOptionError, match="load_model"):
        lm.use_runner("eager")


def test_gguf_that_disagrees_with_its_folder_is_refused(tmp_path):
    from multidraft.models.quantized import QuantizedUnsupported, load_quantized_model

    path = write_tiny_gguf(tmp_path, "qwen2", "Q4_K", seed=3)
    other = tmp_path / "other"
    other.mkdir()
    write_tiny_gguf(other, "qwen2", "Q4_K", seed=4)           # a different model's folder
    with pytest.raises(QuantizedUnsupported, match="does not match"):
        load_quantized_model(other, path)


def test_unembedding_rows_are_the_lm_head(tmp_path):
    lm, folder = _tiny("qwen2", "Q6_K")
    from transformers import AutoModelForCausalLM
    reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    rows = torch.tensor([0, 7, 63])
    assert torch.equal(lm.unembedding(rows), reference.lm_head.weight[rows])


# ---------------------------------------------------------------- the real model


@pytest.fixture(scope="module")
def smollm_quantized():
    lm = load_smollm(runner="quantized")
    if lm.runner != "quantized":
        pytest.skip("this SmolLM2 pull predates kept GGUF files")
    return lm


@pytest.mark.real_model
def test_smollm_auto_runner_is_q8_and_close_to_the_fp32_folder(smollm_quantized, smollm):
    import multidraft
    from multidraft.models.runner import AUTO_NATIVE

    # The default choice on a CPU: its GGUF's Q4_1 / Q8_0 matrices have 8-bit kernels (activations per 32 values).
    default = multidraft.load_model("smollm2-135m")
    assert default.runner == ("native" if AUTO_NATIVE else "quantized-q8")
    ids = smollm.encode("def fibonacci(n):\n    if n < 2:")
    folder = smollm.forward(KVCache(), ids).logits                 # the bf16-rounded folder, in fp32
    for lm in (smollm_quantized, default):
        ours = lm.forward(KVCache(), ids).logits
        # The folder rounds every weight to bf16; the runners use the GGUF's exact values (and q8 8-bit
        # activations): close, not equal.
        assert float((ours - folder).abs().max()) <= 0.03 * float(folder.abs().max()), lm.runner
        assert (ours.argmax(-1) == folder.argmax(-1)).float().mean() >= 0.9, lm.runner


@pytest.mark.real_model
@pytest.mark.slow
def test_smollm_lossless_methods_are_token_identical_to_greedy(smollm_quantized):
    import multidraft

    prompts = ["def quicksort(arr):\n    ", "Write a haiku about the sea.", "x = [1, 2, 3]\ny = [v * 2 for v in x]\n"]
    for prompt in prompts:
        greedy = multidraft.generate(smollm_quantized, prompt, method="greedy", max_new_tokens=40, temperature=0)
        for method in LOSSLESS:
            got = multidraft.generate(smollm_quantized, prompt, method=method, max_new_tokens=40, temperature=0)
            assert got.token_ids == greedy.token_ids, (method, prompt)


def test_without_the_kernels_loading_falls_back_with_one_warning(monkeypatch, smollm_quantized):
    from multidraft.models import loader

    monkeypatch.setattr(gguf_kernels, "_loaded", False)
    monkeypatch.setattr(gguf_kernels, "unavailable_reason", lambda: "this CPU has no AVX2 (test)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lm = loader.load_model("smollm2-135m", runner="quantized")
    assert lm.runner != "quantized"
    assert [str(w.message) for w in caught if "quantized runner" in str(w.message)]


def test_under_auto_only_the_machines_reasons_warn(monkeypatch, smollm_quantized):
    """runner "auto" warns when this machine cannot run the kernels, whatever the reason's words (the loader once
    matched them), and stays silent where the user turned the kernels off."""
    from multidraft.models import loader

    def fallbacks(reason, no_build=False):
        monkeypatch.setattr(gguf_kernels, "_loaded", False)
        monkeypatch.setattr(gguf_kernels, "unavailable_reason", lambda: reason)
        if no_build:
            monkeypatch.setenv("MULTIDRAFT_NO_KERNEL_BUILD", "1")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lm = loader.load_model("smollm2-135m")
        monkeypatch.delenv("MULTIDRAFT_NO_KERNEL_BUILD", raising=False)
        assert lm.runner not in ("quantized", "quantized-q8", "native")
        return [str(w.message) for w in caught if "quantized runner" in str(w.message)]

    assert len(fallbacks("the kernels' self-check failed (test)")) == 1
    assert fallbacks("MULTIDRAFT_NO_KERNEL_BUILD is set", no_build=True) == []


@pytest.mark.real_model
def test_a_quantized_runner_named_on_a_gpu_machine_runs_on_the_cpu(monkeypatch, smollm_quantized):
    """runner="native" without a device on a machine whose torch sees a GPU: the CPU runner, not the HF folder's
    weights moved to the GPU (bench forward-cost --runners native timed the wrong model on an H200 host that way)."""
    import torch

    from multidraft.models import loader

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # no "cannot serve ... using the HF folder's weights" fallback
        lm = loader.load_model("smollm2-135m", runner="native")
    assert lm.runner == "native" and lm.device.type == "cpu"


@pytest.mark.real_model
@pytest.mark.slow
def test_qwen_default_runner_is_q8_and_a_token_alone_equals_it_inside_a_verify():
    """The 1.5B's matrices are Q4_K / Q6_K: `auto` runs it on 8-bit activations (the CPU default), and a token's
    logits are the same bits alone and inside a verify of 2..40 rows, on 1 and 2 threads."""
    import multidraft
    from multidraft.errors import ModelNotFoundError

    try:
        lm = multidraft.load_model("qwen2.5-coder-1.5b")
    except ModelNotFoundError as exc:
        pytest.skip(f"qwen2.5-coder-1.5b not pulled: {exc}")
    assert lm.runner == "native"          # 8-bit activations, through our own decoder layers (Qwen2)
    prefix = lm.encode("def fibonacci(n):\n    ")
    chain = [(37 * i + 11) % 5000 + 100 for i in range(40)]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        cache = KVCache()
        lm.forward(cache, prefix)
        singles = torch.stack([lm.forward(cache, [token]).logits[0] for token in chain])
        for count in (1, 2):
            torch.set_num_threads(count)
            for rows in (2, 3, 8, 17, 40):
                cache = KVCache()
                lm.forward(cache, prefix)
                verify = lm.forward(cache, chain[:rows]).logits
                assert torch.equal(verify, singles[:rows]), (count, rows)
    finally:
        torch.set_num_threads(threads)


def test_the_hf_module_cache_writes_in_place_with_the_bits_of_torch_cat():
    """quantized-q8 on HF's modules keeps keys and values in buffers written in place (kv_cache.InPlaceLayer): a
    token's forward copies no cached key. Every forward's logits equal those over HF's own DynamicCache (torch.cat of
    the whole layer), through a prefill, a verify, a crop and a keep of scattered rows."""
    require_quantized_kernels()
    from multidraft.models.kv_cache import InPlaceLayer
    lm = load_smollm(runner="quantized-q8")      # a real model: its logits depend on the keys a keep moves
    in_place, concatenated = lm.new_cache(), KVCache()
    steps = [("forward", list(range(300, 340))), ("forward", [5]), ("forward", [700, 800, 900, 1000]), ("crop", 42),
             ("forward", [1100, 1200, 1300]), ("keep", (41, [42, 44])), ("forward", [1400]), ("forward", [15, 16])]
    buffers = []
    for kind, arg in steps:
        if kind == "forward":
            got = lm.forward(in_place, arg).logits.clone()         # (the output buffer may be reused)
            expected = lm.forward(concatenated, arg).logits
            assert torch.equal(got, expected), (kind, arg)
        elif kind == "crop":
            in_place.crop(arg), concatenated.crop(arg)
        else:
            in_place.keep(*arg), concatenated.keep(*arg)
        assert in_place.length == concatenated.length
        layer = in_place.hf_cache.layers[0]
        assert isinstance(layer, InPlaceLayer)
        buffers.append(layer.key_buffer.data_ptr())
    # the token and the verify after the prefill are written into the prefill's buffer, not a new tensor
    assert buffers[0] == buffers[1] == buffers[2]
