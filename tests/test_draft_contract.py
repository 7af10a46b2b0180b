"""The typed draft-to-verifier contract (issue #30): a verifier reads only typed Draft parts that its drafter
declares it provides, and a method row that pairs them otherwise is refused when it is built."""

import pytest

import multidraft
from multidraft.decoders.loop import draft_and_verify
from multidraft.decoders.output import OutputCollector
from multidraft.drafters.bild import BiLDDrafter
from multidraft.drafters.draft_model import BeamDrafter, DraftModelDrafter
from multidraft.drafters.prompt_lookup import PromptLookupDrafter
from multidraft.methods import METHODS, Method
from multidraft.sampling import PositionSampler, SamplingParams
from multidraft.types import DRAFT_FIELDS, DecodeStats, Draft
from multidraft.verify.bild import BiLDVerifier
from multidraft.verify.mtad import MTADVerifier
from multidraft.verify.multi_draft import MultiDraftVerifier
from tests.tiny_models import make_tiny_lm


def row(drafter, verifier):
    return Method("pair", lossless=False, description="a test pairing", make_drafter=lambda lm, s, o: None,
                  drafter=drafter, make_verifier=lambda lm, s, o: None, verifier=verifier)


@pytest.mark.parametrize("drafter,verifier,missing", [
    (PromptLookupDrafter, MTADVerifier, "draft_logprobs"),
    (PromptLookupDrafter, MultiDraftVerifier, "chains"),
    (BiLDDrafter, MTADVerifier, "draft_logprobs"),
    (BeamDrafter, MultiDraftVerifier, "chains"),
])
def test_a_verifier_paired_with_a_drafter_lacking_its_fields_is_refused(drafter, verifier, missing):
    with pytest.raises(ValueError, match=f"needs Draft {missing}, which drafter {drafter.__name__} does not"):
        row(drafter, verifier)


def test_matching_pairs_and_every_registered_row_pass():
    row(DraftModelDrafter, MultiDraftVerifier)
    row(BeamDrafter, MTADVerifier)
    row(BiLDDrafter, BiLDVerifier)
    for method in METHODS.values():
        if method.make_drafter is not None:
            assert set(method.drafter.provides) <= set(DRAFT_FIELDS)
            if method.verifier is not None:
                assert set(method.verifier.needs) <= set(method.drafter.provides), method.name


def test_a_row_must_name_its_classes():
    with pytest.raises(ValueError, match="drafter="):
        Method("x", lossless=True, description="", make_drafter=lambda lm, s, o: None)
    with pytest.raises(ValueError, match="together"):
        Method("x", lossless=True, description="", make_drafter=lambda lm, s, o: None, drafter=PromptLookupDrafter,
               verifier=MTADVerifier)


def test_the_loop_names_a_missing_part_instead_of_a_key_error():
    lm = make_tiny_lm("llama", seed=4)

    class Liar(PromptLookupDrafter):
        name = "liar"
        provides = ("draft_logprobs",)          # claims it, never fills it in

        def propose(self, state, max_tokens):
            return Draft.chain([1, 2][:max_tokens])

    sampler = PositionSampler(SamplingParams())
    with pytest.raises(TypeError, match="without draft_logprobs, which verifier 'mtad' needs"):
        draft_and_verify(lm, lm.encode("the cat sat"), Liar(), MTADVerifier(), sampler,
                         OutputCollector(lm, 4), DecodeStats())


def test_typed_parts_show_in_the_info_view():
    draft = Draft.chain([3, 4], draft_logprobs=[-0.5, -0.25], source="test")
    assert draft.info == {"source": "test", "draft_logprobs": [-0.5, -0.25]}
    assert draft.missing(("draft_logprobs", "chains")) == ["chains"] and Draft().missing(("chains",)) == []
    assert multidraft.Draft is Draft
