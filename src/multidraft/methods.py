"""Every decoding method `generate` knows: one row each, the only place methods are wired.

A row names the method, whether it is lossless, its options with defaults, the artifacts it needs, and how it
runs: a drafter factory (plus an optional verifier factory; greedy match / sample-and-match otherwise) for the one
loop of `multidraft.decoders.loop`, or `run` for a method with its own decoder. A row's `load_artifacts` turns the
options that name an artifact (a draft model alias, a stored calibration) into ready objects with that artifact's
own resolver before the factories run: drafters are pure proposers that never load a file. Drafter modules only
define factories; nothing registers itself on import. To add a method: import its factory below and add one row to
`_ROWS` (the parametrized tests in tests/test_methods.py then cover it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

# Leaf modules only (never the package root `multidraft`, which imports api -> this module).
from multidraft.blockwise import artifacts as blockwise_artifacts
from multidraft.blockwise import drafter as blockwise
from multidraft.decoders.builtin_methods import check_beam, check_pld, make_pld_drafter, run_autoregressive, run_beam
from multidraft.drafters import bild, draft_model_options, pld_plus, suffix
from multidraft.errors import InvalidOptionError, UnknownMethodError
from multidraft.models.draft_models import resolve_draft_model
from multidraft.pldplus import calibration as pld_plus_calibration
from multidraft.superposed.decoder import OPTIONS as SUPERPOSED_OPTIONS
from multidraft.superposed.decoder import check_options as check_superposed
from multidraft.superposed.decoder import run_superposed
from multidraft.verify.bild import BiLDVerifier
from multidraft.verify.mtad import MTADVerifier
from multidraft.verify.multi_draft import SELECTION_SCHEMES, MultiDraftVerifier

# The files or models a method needs besides the target model, and how a user gets them.
ARTIFACTS = {
    "draft_model": "a smaller LM sharing the target's tokenizer (option draft_model=, a registry alias or path)",
    "ngram": "an n-gram file for the target's tokenizer (`multidraft ngram build`; option ngram= or ngram_path=)",
    "heads": "blockwise prediction heads trained for the target (`multidraft heads train`; option heads=)",
}


@dataclass(frozen=True)
class Method:
    name: str
    lossless: bool
    description: str
    options: dict[str, Any] = field(default_factory=dict)     # option name -> default
    # Speculative methods: drafter (and optionally verifier) from (lm, sampler, options); they run in the one loop.
    make_drafter: Optional[Callable] = None
    make_verifier: Optional[Callable] = None
    # Methods with their own decoder: run(lm, prompt_ids, sampler, output, stats, options) -> drafts or None.
    run: Optional[Callable] = None
    # check_options(options) raises InvalidOptionError for values that are wrong whatever the model (types,
    # ranges), so the CLI, the bench and the server refuse them before loading a model or running anything.
    check_options: Optional[Callable[[dict], None]] = None
    artifacts: tuple[str, ...] = ()        # keys of ARTIFACTS needed with the default options
    # load_artifacts(lm, options) -> options with artifact names replaced by ready objects (see the docstring).
    load_artifacts: Optional[Callable] = None
    # Verifies by greedy matching only: a temperature > 0 is refused before any artifact loads.
    greedy_only: bool = False
    # Old option name -> its new name: refused with a message naming the new one (never silently accepted).
    renamed_options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if (self.make_drafter is None) == (self.run is None):
            raise ValueError(f"method {self.name!r} needs exactly one of make_drafter and run")
        unknown = set(self.artifacts) - set(ARTIFACTS)
        if unknown:
            raise ValueError(f"method {self.name!r} names unknown artifacts {sorted(unknown)}")

    def resolve_options(self, given: dict[str, Any]) -> dict[str, Any]:
        renamed = sorted(set(given) & set(self.renamed_options))
        if renamed:
            raise InvalidOptionError(f"method {self.name!r} has no option {renamed[0]!r} any more: it is now "
                                     f"{self.renamed_options[renamed[0]]!r}")
        unknown = sorted(set(given) - set(self.options))
        if unknown:
            valid = ", ".join(sorted(self.options)) or "none"
            raise InvalidOptionError(f"method {self.name!r} has no option {', '.join(map(repr, unknown))}; "
                                     f"its options are: {valid}")
        options = {**self.options, **given}
        if self.check_options is not None:
            try:
                self.check_options(options)
            except InvalidOptionError as exc:     # say which method, for the bench's METHOD.NAME=VALUE options
                raise type(exc)(f"method {self.name!r}: {exc}") from None
        return options


def _with_draft_model(method: str) -> Callable:
    def load(lm, options):
        return {**options, "draft_model": resolve_draft_model(options["draft_model"], lm, method)}
    return load


def _check_pld_plus(options):
    pld_plus.check_options(options)
    pld_plus_calibration.check_options(options)


# PLD+'s attention heads were "heads": that word now means BPD's trained prediction heads only.
PLD_PLUS_RENAMED = {"heads": "induction_heads", "num_heads": "num_induction_heads", "head_set": "induction_head_set"}


def _speculative_verifier(lm, sampler, options):
    return MultiDraftVerifier("speculative")


def _mtad_verifier(lm, sampler, options):
    return MTADVerifier(options["accept_threshold"], options["threshold_semantics"])


def _bild_verifier(lm, sampler, options):
    return BiLDVerifier(options["rollback_threshold"])


_ROWS = (
    Method("greedy", lossless=True, description="plain greedy decoding (argmax at every step)",
           run=run_autoregressive),
    Method("sample", lossless=True, description="plain sampling with temperature, top-k and top-p",
           run=run_autoregressive),
    Method("beam", lossless=False, description="beam search over the target model (a different decoder, not greedy)",
           options={"num_beams": 4, "length_penalty": 1.0}, run=run_beam, check_options=check_beam),
    Method("pld", lossless=True,
           description="prompt lookup: drafts copied from the context after the trailing n-gram",
           options={"max_ngram": 3, "num_draft_tokens": 10, "variant": "hf"},
           make_drafter=make_pld_drafter, check_options=check_pld),
    Method("pld_plus", lossless=True,
           description="PLD+: prompt lookup ranked by the model's hidden states (rank_by='hidden') or induction-head "
                       "attention (rank_by='attention')",
           options={"rank_by": "hidden", "num_draft_tokens": pld_plus.DEFAULT_NUM_DRAFT_TOKENS,
                    "short_draft_tokens": pld_plus.DEFAULT_SHORT_DRAFT_TOKENS, "layer": None, "theta": None,
                    "avg_window": 1, "induction_heads": None, "num_induction_heads": 50,
                    "induction_head_set": "selected", "aggregate": "max", "scope": "context"},
           make_drafter=pld_plus.make_drafter, check_options=_check_pld_plus,
           load_artifacts=pld_plus_calibration.resolve_options, renamed_options=PLD_PLUS_RENAMED),
    Method("suffix", lossless=True,
           description="SuffixDecoding: frequency-weighted draft trees from suffix automata over the context and an "
                       "optional cross-request store (store=multidraft.SuffixStore())",
           options={"store": None, "max_draft_tokens": suffix.DEFAULT_MAX_DRAFT_TOKENS, "alpha": suffix.DEFAULT_ALPHA,
                    "min_token_prob": suffix.DEFAULT_MIN_TOKEN_PROB, "use_context": True, "update_store": True, "tree": True},
           make_drafter=suffix.make_drafter),
    Method("speculative", lossless=True,
           description="speculative sampling with a draft model (one chain of num_draft_tokens, rejection with the "
                       "residual; greedy match at temperature 0); lossless",
           options={"draft_model": None, "num_draft_tokens": 4, "adaptive": False, "draft_temperature": None,
                    "stop_below": 0.0},
           make_drafter=draft_model_options.make_speculative_drafter, make_verifier=_speculative_verifier,
           artifacts=("draft_model",), check_options=draft_model_options.check_options,
           load_artifacts=_with_draft_model("speculative")),
    Method("multi_draft", lossless=True,
           description="num_drafts chains from a draft model verified as one tree in one target forward, token "
                       f"chosen by a selection scheme ({', '.join(SELECTION_SCHEMES)}; is_lp_truncated is seed 002's 'IS'); "
                       "lossless",
           options={"draft_model": None, "num_drafts": 2, "num_draft_tokens": 4, "selection": "specinfer",
                    "draft_temperatures": None, "selection_options": None, "adaptive": False, "stop_below": 0.0},
           make_drafter=draft_model_options.make_multi_draft_drafter,
           make_verifier=draft_model_options.make_multi_draft_verifier,
           artifacts=("draft_model",), check_options=draft_model_options.check_options,
           load_artifacts=_with_draft_model("multi_draft")),
    Method("mtad", lossless=False,
           description="LOSSY multi-token assisted decoding: draft beam search, longest prefix whose target/draft "
                       "joint likelihood ratio passes accept_threshold, then one target token (biased toward high "
                       "likelihood, not the target's sampling law); at temperature 0 beam search over the unwarped draft "
                       "law (the paper's greedy-MTJD approximation), not greedy decoding",
           options={"draft_model": None, "num_beams": 8, "num_draft_tokens": 4, "accept_threshold": 0.1,
                    "threshold_semantics": "paper", "deterministic": False},
           make_drafter=draft_model_options.make_mtad_drafter, make_verifier=_mtad_verifier,
           artifacts=("draft_model",), check_options=draft_model_options.check_options,
           load_artifacts=_with_draft_model("mtad")),
    Method("bild", lossless=False,
           description="LOSSY Big Little Decoder: the draft model writes until its top probability falls below "
                       "fallback_threshold (or max_draft_tokens), the target keeps the tokens before the first one "
                       "whose NLL exceeds rollback_threshold, then emits one token (not the target's sampling law)",
           options={"draft_model": None, "max_draft_tokens": 10, "fallback_threshold": 0.9,
                    "rollback_threshold": 2.0},
           make_drafter=bild.make_drafter, make_verifier=_bild_verifier, artifacts=("draft_model",),
           check_options=bild.check_options, load_artifacts=_with_draft_model("bild")),
    Method("superposed", lossless=False,
           description="Superposed Decoding: k drafts from one forward pass per token, with n-gram interpolation "
                       "(a new decoder, lossy); drafts ranked in Generation.drafts",
           options=dict(SUPERPOSED_OPTIONS), run=run_superposed, artifacts=("ngram",),
           check_options=check_superposed),
    Method("blockwise", lossless=True,
           description="blockwise parallel decoding: trained heads draft a block, lattice of each head's top "
                       "lattice_k tokens rescored (none / ngram p-best DP / neural local with rescorer=LM), "
                       "p drafts verified as one tree (greedy only)",
           options={"heads": None, "num_heads": None, "rescoring": "ngram", "lattice_k": 8, "num_paths": 2,
                    "alpha": 1.0, "ngram_order": 3, "ngram_path": None, "ngram": None, "rescorer": None},
           make_drafter=blockwise.make_drafter, artifacts=("heads", "ngram"),
           check_options=blockwise.check_options, load_artifacts=blockwise_artifacts.resolve_options,
           greedy_only=True),
)

METHODS: dict[str, Method] = {method.name: method for method in _ROWS}
if len(METHODS) != len(_ROWS):
    raise RuntimeError("two rows of multidraft.methods share a method name")


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise UnknownMethodError(f"unknown method {name!r}; choose one of: {', '.join(sorted(METHODS))}")
    return METHODS[name]


def available_methods() -> dict[str, Method]:
    return dict(METHODS)
