"""Every verifier must accept drafts it should accept (issue #33).

Greedy equality and law tests pass with a verifier that rejects every draft (each step then emits the target's own
token, which is plain decoding). So every drafting method of multidraft.methods runs here on a setting built to be
copied -- a sharp tiny target whose continuation repeats one token, a prompt that already holds that run, a draft
model identical to the target, blockwise heads that repeat head 1 -- and must reach a mean acceptance length above a
floor; rejecting everything gives exactly 1.0. The negative control plants that reject-all verifier in every verifier
class and checks that every case then falls below the floor, and a last test checks that every verifier class
(greedy match, sample-and-match, multi-draft selection, MTAD, BiLD; blockwise verifies by greedy match) was used.
"""

import pytest
import torch

import multidraft
import multidraft.verify.bild
import multidraft.verify.mtad
import multidraft.verify.multi_draft
from multidraft.decoders.builtin_methods import NoDrafter
from multidraft.methods import METHODS
from multidraft.types import Draft
from multidraft.verify.base import Verifier
from tests.tiny_models import make_tiny_lm, perturbed_copy, random_heads

pytestmark = pytest.mark.usefixtures("one_thread")

FLOOR = 1.3            # mean acceptance length; a verifier that rejects everything gives exactly 1.0
NEW_TOKENS = 24
SELECTIONS = multidraft.verify.multi_draft.SELECTION_SCHEMES
DRAFTING = sorted(name for name, method in METHODS.items()
                  if method.make_drafter is not None and method.drafter is not NoDrafter)


def cases():
    """(method, temperature, extra options): every drafting method greedy and, unless greedy-only, sampled; every
    multi-draft selection scheme."""
    for name in DRAFTING:
        for temperature in (0.0, 1.0):
            if temperature and METHODS[name].greedy_only:
                continue
            if name == "multi_draft":
                for selection in SELECTIONS:
                    yield pytest.param(name, temperature, {"selection": selection},
                                       id=f"{name}-{selection}-T{temperature:g}")
            else:
                yield pytest.param(name, temperature, {}, id=f"{name}-T{temperature:g}")


@pytest.fixture(scope="module")
def copy_setting(tiny_ngram):
    """A tiny target whose greedy continuation of "a a a a" settles into one repeated token (p ~ 0.985 at T = 1),
    the prompt extended with the start of that run, and every artifact a drafting method may need."""
    lm = make_tiny_lm("llama", seed=11)
    with torch.no_grad():
        lm.model.lm_head.weight.mul_(6.0)
    prompt_ids = lm.encode("a a a a") + multidraft.generate(lm, "a a a a", max_new_tokens=12).token_ids
    assert prompt_ids[-4:] == [prompt_ids[-1]] * 4, "the setting no longer repeats a token: pick another seed"
    artifacts = {"draft_model": perturbed_copy(lm, 0.0, name="tiny-twin"), "ngram": tiny_ngram,
                 "heads": random_heads(lm, 4, scale=0.0)}     # scale 0: every head repeats head 1's token
    return lm, prompt_ids, artifacts


def run(copy_setting, name, temperature, extra):
    lm, prompt_ids, artifacts = copy_setting
    options = {key: value for key, value in artifacts.items() if key in METHODS[name].options}
    # draft_length="fixed": every drafted token verified, the acceptance the floor is about (adaptive may cut it)
    return multidraft.generate(lm, prompt_ids, method=name, max_new_tokens=NEW_TOKENS, temperature=temperature,
                               seed=0, draft_length="fixed", **options, **extra).stats


def verifier_classes():
    """The library's verifier classes (other test modules define planted-bug subclasses of their own)."""
    found, todo = [], list(Verifier.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("multidraft."):
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def reject_all(verify):
    """The planted bug: verify an empty draft instead (no node accepted; the next token is still the target's)."""
    def rejecting(self, draft, target_logits, sampler, first_position):
        return verify(self, Draft(), target_logits[:1], sampler, first_position)
    return rejecting


@pytest.mark.parametrize("name, temperature, extra", list(cases()))
def test_every_verifier_accepts_a_copyable_draft(copy_setting, name, temperature, extra):
    stats = run(copy_setting, name, temperature, extra)
    assert stats.draft_tokens_proposed > 0, f"{name}: no draft proposed on a prompt built to be copied"
    assert stats.mean_acceptance_length >= FLOOR, (
        f"{name} T={temperature} {extra}: mean acceptance length {stats.mean_acceptance_length:.2f} < {FLOOR} "
        f"({stats.draft_tokens_accepted} of {stats.draft_tokens_proposed} drafted tokens accepted)")


@pytest.mark.parametrize("name, temperature, extra", list(cases()))
def test_a_verifier_that_rejects_everything_is_caught(copy_setting, name, temperature, extra, monkeypatch):
    for cls in verifier_classes():
        if "verify" in vars(cls):
            monkeypatch.setattr(cls, "verify", reject_all(cls.verify))
    stats = run(copy_setting, name, temperature, extra)
    assert stats.draft_tokens_accepted == 0 and stats.mean_acceptance_length < FLOOR


def test_every_verifier_class_is_exercised(copy_setting, monkeypatch):
    used = set()
    for cls in verifier_classes():
        if "verify" in vars(cls):
            def recording(self, *args, _verify=cls.verify, _cls=cls, **kwargs):
                used.add(_cls.__name__)
                return _verify(self, *args, **kwargs)
            monkeypatch.setattr(cls, "verify", recording)
    for case in cases():
        run(copy_setting, *case.values)
    assert used == {cls.__name__ for cls in verifier_classes() if "verify" in vars(cls)}, used
