"""spd.md §7.7: with a history-free LM (logits depend only on the step) and alpha = 0, SPD is a width-k
beam search over the top-K tokens with scores log p_hat_tau and the 2k / EOS bookkeeping: same drafts,
same order, same scores as a plain-Python reference."""

import math
from types import SimpleNamespace

import pytest
import torch

from multidraft.superposed.decoder import SuperposedConfig, superposed_decode
from multidraft.models.runner import LM
from tests.tiny_models import make_tokenizer

V, EOS = 12, 2


class StepTableLM(torch.nn.Module):
    """Call i returns logits table[i] whatever the input; it still grows the KV cache like a real model."""

    def __init__(self, table):
        super().__init__()
        self.table = table
        self.calls = 0
        self.embed = torch.nn.Embedding(V, 4)
        self.head = torch.nn.Linear(4, V)
        self.config = SimpleNamespace(num_hidden_layers=1, num_attention_heads=1, hidden_size=4,
                                      max_position_embeddings=64, eos_token_id=EOS, _attn_implementation="sdpa")
        self.generation_config = SimpleNamespace(eos_token_id=EOS)

    def get_input_embeddings(self):
        return self.embed

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids=None, inputs_embeds=None, past_key_values=None, **kwargs):
        length = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        past_key_values.update(torch.zeros(1, 1, length, 1), torch.zeros(1, 1, length, 1), 0)
        logits = self.table[min(self.calls, len(self.table) - 1)].expand(1, length, V)
        self.calls += 1
        return SimpleNamespace(logits=logits)


def reference(table, k, K, tau, G):
    alive, fin = [((), 0.0)], []
    for j in range(G):
        logp = torch.log_softmax(table[j].double() / tau, -1)
        top, cand = torch.topk(logp, K)
        lp_hat = (top - torch.logsumexp(top, 0)).tolist()
        grid = [(S + lp_hat[r], i, r, seq + (int(cand[r]),))
                for i, (seq, S) in enumerate(alive[:1] if j == 0 else alive) for r in range(K)]
        grid = sorted(grid, key=lambda x: (-x[0], x[1], x[2]))[: 2 * k]
        fin = sorted(fin + [(seq, S) for S, _, _, seq in grid if seq[-1] == EOS], key=lambda f: -f[1])[:k]
        alive = [(seq, S) for S, _, _, seq in grid if seq[-1] != EOS][:k]
    pool = [(list(seq), S, S / len(seq)) for seq, S in alive] + [(list(seq), S, S / len(seq)) for seq, S in fin]
    return sorted(pool, key=lambda d: -d[2])[:k]


@pytest.mark.parametrize("seed, k, K, tau", [(0, 2, 4, 1.0), (1, 3, 9, 0.5), (2, 4, 6, 2.0), (3, 3, 12, 0.3)])
def test_history_free_lm_gives_restricted_beam_search(seed, k, K, tau):
    gen = torch.Generator().manual_seed(seed)
    G = 6
    table = torch.randn(G, V, generator=gen) * 2
    table[1, EOS] = table[1].max() + 1.0  # EOS is the top token at step 2: finished drafts appear
    lm = LM(StepTableLM(table), make_tokenizer(), name="step-table")
    out = superposed_decode(lm, [5, 6, 7], G, SuperposedConfig(num_drafts=k, n_token_sample=K, tau=tau, alpha=0.0))
    expected = reference(table, k, K, tau, G)
    assert [d.token_ids for d in out.drafts] == [e[0] for e in expected]
    assert [d.score for d in out.drafts] == pytest.approx([e[1] for e in expected], abs=1e-9)
    assert any(d.finished for d in out.drafts) == any(e[0][-1] == EOS for e in expected)
    assert lm.model.calls == G
    assert all(math.isfinite(d.score) for d in out.drafts)
