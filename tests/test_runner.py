"""The LM runner: tree forwards, cache cropping and path keeping agree with plain forwards."""

import pytest
import torch

from multidraft.errors import InvalidOptionError, PromptError
from multidraft.models.runner import tree_attention_mask
from tests.tiny_models import make_tiny_lm_with


@pytest.fixture(scope="module", params=["llama-eager", "qwen2-eager", "llama-static", "qwen2-static"])
def tiny_lm(request):
    """Every runner test on HF's dynamic cache and on the static runner's preallocated one."""
    arch, runner = request.param.split("-")
    return make_tiny_lm_with(runner, arch, seed=2)


def full_logits(lm, token_ids):
    cache = lm.new_cache()
    return lm.forward(cache, token_ids).logits


def test_extend_equals_one_forward(tiny_lm):
    ids = [5, 9, 11, 4, 7, 3, 20, 21]
    reference = full_logits(tiny_lm, ids)
    cache = tiny_lm.new_cache()
    first = tiny_lm.forward(cache, ids[:5]).logits
    second = tiny_lm.forward(cache, ids[5:]).logits
    torch.testing.assert_close(torch.cat([first, second]), reference, atol=1e-5, rtol=1e-4)


def test_crop_then_extend_equals_fresh_prefill(tiny_lm):
    cache = tiny_lm.new_cache()
    tiny_lm.forward(cache, [5, 9, 11, 4, 7, 3])
    cache.crop(3)
    assert cache.length == 3
    after_crop = tiny_lm.forward(cache, [30, 31]).logits
    reference = full_logits(tiny_lm, [5, 9, 11, 30, 31])[3:]
    torch.testing.assert_close(after_crop, reference, atol=1e-5, rtol=1e-4)


def test_tree_forward_matches_each_branch_alone(tiny_lm):
    prefix = [5, 9, 11, 4]
    # root children: 7 (node 0) and 8 (node 1); node 0 has children 12 (node 2) and 13 (node 3); node 2 -> 14 (node 4)
    tokens = [7, 8, 12, 13, 14]
    parents = [-1, -1, 0, 0, 2]
    cache = tiny_lm.new_cache()
    tiny_lm.forward(cache, prefix)
    tree_logits = tiny_lm.forward(cache, tokens, parents=parents).logits
    branches = {0: [7], 1: [8], 2: [7, 12], 3: [7, 13], 4: [7, 12, 14]}
    for node, path in branches.items():
        reference = full_logits(tiny_lm, prefix + path)[-1]
        torch.testing.assert_close(tree_logits[node], reference, atol=1e-5, rtol=1e-4)


def test_keep_path_after_tree_equals_fresh_prefill(tiny_lm):
    prefix = [5, 9, 11, 4]
    cache = tiny_lm.new_cache()
    tiny_lm.forward(cache, prefix)
    tiny_lm.forward(cache, [7, 8, 12, 13, 14], parents=[-1, -1, 0, 0, 2])
    cache.keep(len(prefix), [len(prefix) + 0, len(prefix) + 3])   # keep path 7 -> 13
    assert cache.length == len(prefix) + 2
    continued = tiny_lm.forward(cache, [20]).logits[-1]
    reference = full_logits(tiny_lm, prefix + [7, 13, 20])[-1]
    torch.testing.assert_close(continued, reference, atol=1e-5, rtol=1e-4)


def test_inputs_embeds_equal_token_ids(tiny_lm):
    ids = [5, 9, 11, 4]
    embeds = tiny_lm.embed(ids)
    by_embeds = tiny_lm.forward(tiny_lm.new_cache(), inputs_embeds=embeds).logits
    torch.testing.assert_close(by_embeds, full_logits(tiny_lm, ids), atol=1e-6, rtol=1e-5)


def test_hidden_layer_capture_matches_hf(tiny_lm):
    ids = [5, 9, 11, 4]
    out = tiny_lm.forward(tiny_lm.new_cache(), ids, hidden_layer=1)
    with torch.no_grad():
        hf = tiny_lm.model(torch.tensor([ids]), output_hidden_states=True)
    torch.testing.assert_close(out.hidden, hf.hidden_states[1][0].float(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("runner", ["eager", "static"])
def test_attention_capture_matches_hf(runner):
    lm = make_tiny_lm_with(runner, "llama", seed=3, attn_implementation="eager")
    ids = [5, 9, 11, 4, 6]
    out = lm.forward(lm.new_cache(), ids, attention_heads=[(1, 2), (0, 1)], attention_rows=[-1])
    with torch.no_grad():
        hf = lm.model(torch.tensor([ids]), output_attentions=True)
    torch.testing.assert_close(out.attention[0, 0], hf.attentions[1][0, 2, -1], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.attention[1, 0], hf.attentions[0][0, 1, -1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("runner", ["eager", "static"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_attention_rows_without_eager_equal_eager_weights_on_a_tree(arch, runner):
    """With sdpa the runner keeps queries and keys; their rows equal eager's weights, tree masks and GQA included."""
    heads = [(1, 2), (0, 1), (1, 3), (0, 0)]
    ids, parents = [5, 9, 11, 4, 6, 7, 8, 3], [-1, 0, 0, 2]   # root + a tree: rows 1, 2 under 0; 3 under 2
    rows = {}
    for kernel in ("sdpa", "eager"):
        lm = make_tiny_lm_with(runner, arch, seed=3, attn_implementation=kernel)
        with torch.no_grad():      # sharper attention than the random init, so rows differ from uniform
            for layer in lm._decoder_layers:
                layer.self_attn.q_proj.weight.mul_(20.0)
                layer.self_attn.k_proj.weight.mul_(20.0)
        cache = lm.new_cache()
        lm.forward(cache, ids[:4])
        rows[kernel] = lm.forward(cache, ids[4:], parents=parents, attention_heads=heads).attention
        lm.forward(cache, [9, 9, 9])           # later writes into the cache must not change the captured rows
    assert isinstance(rows["eager"], torch.Tensor) and not isinstance(rows["sdpa"], torch.Tensor)
    for row, path in ((0, [0]), (2, [0, 2]), (3, [0, 2, 3])):
        columns = list(range(4)) + [4 + r for r in path]
        computed = rows["sdpa"].weights(row, columns)
        torch.testing.assert_close(computed, rows["eager"][:, row, columns], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(computed.sum(-1), torch.ones(len(heads)))
        assert computed.max() > 1.5 / len(columns)           # not a uniform row: the test can tell rows apart


def test_bad_layer_and_head_are_clear_errors(tiny_llama):
    with pytest.raises(InvalidOptionError, match="hidden layer 9"):
        tiny_llama.forward(tiny_llama.new_cache(), [5], hidden_layer=9)
    with pytest.raises(InvalidOptionError, match="attention head"):
        tiny_llama.forward(tiny_llama.new_cache(), [5], attention_heads=[(0, 99)])


def test_context_overflow_is_a_prompt_error(tiny_llama):
    with pytest.raises(PromptError, match="context"):
        tiny_llama.forward(tiny_llama.new_cache(), [5] * 300)


def test_tree_mask_shape_and_values():
    mask = tree_attention_mask([-1, 0, -1], past_length=2, dtype=torch.float32, device="cpu")
    assert mask.shape == (1, 1, 3, 5)
    allowed = mask[0, 0] == 0
    assert allowed.tolist() == [[True, True, True, False, False],
                                [True, True, True, True, False],
                                [True, True, False, False, True]]


def test_visible_mask_over_a_cached_tree_equals_each_branch_alone(tiny_lm):
    """`visible` (what a draft session uses): a second tree level fed on top of cached tree nodes sees only its own
    branch, so each new node gets the logits of its branch run as a plain chain."""
    prompt, level1, level2 = [1, 5, 9, 3], [7, 8], [4, 6]        # level2[i] hangs below level1[i]
    cache = tiny_lm.new_cache(dynamic=True)               # the static runner's cache refuses `visible`
    tiny_lm.forward(cache, prompt)
    tiny_lm.forward(cache, level1, parents=[-1, -1])
    past = cache.length
    allowed = torch.zeros(2, past + 2, dtype=torch.bool)
    allowed[:, :len(prompt)] = True
    for row in range(2):
        allowed[row, len(prompt) + row] = True          # its parent in the cached level
        allowed[row, past + row] = True                  # itself
    got = tiny_lm.forward(cache, level2, visible=(allowed, [len(prompt) + 1] * 2)).logits
    for row in range(2):
        alone = tiny_lm.forward(tiny_lm.prefill(prompt)[0], [level1[row], level2[row]]).logits[-1]
        torch.testing.assert_close(got[row], alone, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="visible needs"):
        tiny_lm.forward(cache, [1], visible=(allowed, [5, 5]))


def test_every_registered_runner_is_a_command_line_choice():
    """Adding a runner is its file and its registry line; the command line's choices (kept free of torch) must name
    it too: this fails until they do."""
    from multidraft.models.runner_choice import RUNNER_CHOICES
    from multidraft.models.runners import REGISTRY

    assert sorted(RUNNER_CHOICES) == sorted(["auto", *REGISTRY])
