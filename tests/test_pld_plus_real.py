"""PLD+ on the real SmolLM2-135M (fp32, eager and sdpa attention): token-identical to greedy on every input-guided task."""

import pytest
import torch

import multidraft
from multidraft import data
from multidraft.eval.tasks import INPUT_GUIDED_TASKS, load_task, required_data
from tests.installed import load_smollm

pytestmark = pytest.mark.real_model

HAND_PROMPTS = [
    [{"role": "user", "content": "Repeat this list exactly: apples, pears, plums, apples, pears, plums, cherries."}],
    "The capital of France is Paris. The capital of Italy is Rome. The capital of France is",
]


@pytest.fixture(scope="module")
def smollm_eager():
    return load_smollm(dtype=torch.float32, attn_implementation="eager")      # `make test` pulls it: else a failure


def task_prompts():
    prompts = HAND_PROMPTS[:1]
    for name in INPUT_GUIDED_TASKS:
        if all(data.is_pulled(d) for d in required_data(name)):
            prompts.append(load_task(name, limit=1)[0].input)
    return prompts


def test_both_rankers_equal_greedy_on_every_task(smollm_eager):
    prompts = task_prompts()
    accepted = 0
    for prompt in prompts:
        greedy = multidraft.generate(smollm_eager, prompt, max_new_tokens=16)
        for rank_by in ("hidden", "attention"):
            out = multidraft.generate(smollm_eager, prompt, method="pld_plus", rank_by=rank_by, max_new_tokens=16,
                                      draft_length="fixed")             # the acceptance below: not timing-bound
            assert out.token_ids == greedy.token_ids, (rank_by, prompt)
            accepted += out.stats.draft_tokens_accepted
    assert accepted > 0


def test_sampling_equals_plain_sampling(smollm_eager):
    plain = multidraft.generate(smollm_eager, HAND_PROMPTS[0], method="sample", temperature=0.8, seed=3,
                                max_new_tokens=16)
    for rank_by in ("hidden", "attention"):
        ours = multidraft.generate(smollm_eager, HAND_PROMPTS[0], method="pld_plus", rank_by=rank_by,
                                   temperature=0.8, seed=3, max_new_tokens=16)
        assert ours.token_ids == plain.token_ids


def test_attention_ranking_without_the_eager_kernel(smollm_eager):
    """On sdpa the runner computes the induction heads' rows from queries and keys: equal to eager's weights, and
    PLD+(attention) stays token-identical to greedy on that kernel."""
    from multidraft.models.loader import load_model
    from multidraft.pldplus.calibration import default_induction_heads
    sdpa = load_model("smollm2-135m", dtype=torch.float32, runner="eager")      # the HF folder, as smollm_eager
    assert sdpa.attn_implementation == "sdpa"
    heads = default_induction_heads(sdpa, 50)
    ids = sdpa.encode(task_prompts()[-1])
    eager_rows = smollm_eager.forward(smollm_eager.new_cache(), ids, attention_heads=heads).attention[:, -1]
    computed = sdpa.forward(sdpa.new_cache(), ids, attention_heads=heads).attention.weights(len(ids) - 1,
                                                                                            range(len(ids)))
    torch.testing.assert_close(computed, eager_rows, atol=2e-5, rtol=1e-3)
    for prompt in task_prompts()[:3]:
        greedy = multidraft.generate(sdpa, prompt, max_new_tokens=16)
        out = multidraft.generate(sdpa, prompt, method="pld_plus", rank_by="attention", max_new_tokens=16)
        assert out.token_ids == greedy.token_ids, prompt
