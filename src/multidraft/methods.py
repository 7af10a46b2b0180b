"""Every decoding method `generate` knows: one row each, the only place methods are wired.

A row names the method, whether it is lossless, its options as typed specs (multidraft.method_options: default,
type, bounds, HTTP, artifact; the server's allow-list, the CLI's -o and `multidraft methods` derive from them),
the artifacts it needs, and how it
runs: a drafter factory (plus an optional verifier factory; greedy match / sample-and-match otherwise) for the one
loop of `multidraft.decoders.loop`, or `run` for a method with its own decoder. A row's `load_artifacts` turns the
options that name an artifact (a draft model alias, a stored calibration) into ready objects with that artifact's
own resolver before the factories run: drafters are pure proposers that never load a file. Drafter modules only
define factories; nothing registers itself on import. To add a method: import its factory below and add one row to
`_ROWS` (the parametrized tests in tests/test_methods.py then cover it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

# Leaf modules only (never the package root `multidraft`, which imports api -> this module).
from multidraft.blockwise import artifacts as blockwise_artifacts
from multidraft.blockwise import drafter as blockwise
from multidraft.decoders.builtin_methods import NoDrafter, make_no_drafter, make_pld_drafter, run_beam
from multidraft.drafters import bild, draft_model_options, pld_plus, suffix
from multidraft.drafters.prompt_lookup import VARIANTS as PLD_VARIANTS
from multidraft.errors import InvalidOptionError, UnknownMethodError
from multidraft.method_options import BIG, Opt, check_value, parse_cli_value
from multidraft.models.draft_models import resolve_draft_model
from multidraft.ngram.resolve import resolve_ngram
from multidraft.pldplus import calibration as pld_plus_calibration
from multidraft.pldplus.ranking import SCOPES as PLD_PLUS_SCOPES
from multidraft.superposed.decoder import FIRST_STEPS, RESET_CHOICES
from multidraft.superposed.decoder import OPTIONS as SUPERPOSED_OPTIONS
from multidraft.superposed.decoder import check_options as check_superposed
from multidraft.superposed.decoder import run_superposed
from multidraft.drafters.base import Drafter
from multidraft.drafters.bild import BiLDDrafter
from multidraft.drafters.draft_model import BeamDrafter, DraftModelDrafter
from multidraft.drafters.pld_plus import PLDPlusDrafter
from multidraft.drafters.prompt_lookup import PromptLookupDrafter
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.types import DRAFT_FIELDS
from multidraft.verify import GreedyVerifier, SampleMatchVerifier
from multidraft.verify.base import Verifier
from multidraft.verify.bild import BiLDVerifier
from multidraft.validation import MIN_TEMPERATURE, ServerBounds, did_you_mean
from multidraft.verify.mtad import THRESHOLD_SEMANTICS, MTADVerifier
from multidraft.verify.multi_draft import SELECTION_SCHEMES, MultiDraftVerifier

# The files or models a method needs besides the target model, and how a user gets them.
ARTIFACTS = {
    "draft_model": "a smaller LM sharing the target's tokenizer (option draft_model=, a registry alias or path)",
    "ngram": "an n-gram file for the target's tokenizer (`multidraft ngram build`; option ngram= or ngram_path=)",
    "heads": "blockwise prediction heads trained for the target (`multidraft heads train`; option heads=)",
}

# What an option may name: the artifacts above, and a rescoring model (blockwise's optional neural rescorer).
NAMED_ARTIFACTS = (*ARTIFACTS, "rescorer")


@dataclass(frozen=True)
class Method:
    name: str
    lossless: bool
    description: str
    specs: dict[str, Opt] = field(default_factory=dict)     # option name -> its typed spec (default, type, HTTP...)
    # Speculative methods: drafter (and optionally verifier) from (lm, sampler, options); they run in the one loop.
    # `drafter` / `verifier` name the classes the factories build: the row checks, when it is built, that the
    # drafter provides every typed Draft part the verifier needs (Drafter.provides, Verifier.needs).
    make_drafter: Optional[Callable] = None
    make_verifier: Optional[Callable] = None
    drafter: Optional[type] = None
    verifier: Optional[type] = None
    # Methods with their own decoder: run(lm, prompt_ids, sampler, output, stats, options) -> drafts or None.
    run: Optional[Callable] = None
    # check_options(options) raises InvalidOptionError for what the specs cannot say (relations between options,
    # checks with their own wording); then each option's spec checks its type and range (method_options.py). Both
    # run once, in resolve_options, so the CLI, the bench and the server refuse bad values before loading anything
    # and the factories receive checked options.
    check_options: Optional[Callable[[dict], None]] = None
    artifacts: tuple[str, ...] = ()        # keys of ARTIFACTS needed with the default options
    # load_artifacts(lm, options, artifacts) -> options with artifact names replaced by ready objects (see the
    # docstring), loaded into `artifacts` (multidraft.Artifacts: the caller's, never a module global).
    load_artifacts: Optional[Callable] = None
    # Verifies by greedy matching only: a temperature > 0 is refused before any artifact loads.
    greedy_only: bool = False
    # Old option name -> its new name: refused with a message naming the new one (never silently accepted).
    renamed_options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if (self.make_drafter is None) == (self.run is None):
            raise ValueError(f"method {self.name!r} needs exactly one of make_drafter and run")
        unknown = set(self.artifacts) - set(ARTIFACTS)
        named = {opt.artifact for opt in self.specs.values() if opt.artifact is not None}
        unknown |= named - set(NAMED_ARTIFACTS)
        if unknown:
            raise ValueError(f"method {self.name!r} names unknown artifacts {sorted(unknown)}")
        bad = [name for name, opt in self.specs.items() if not isinstance(opt, Opt)]
        if bad:
            raise ValueError(f"method {self.name!r}: options {bad} need a method_options.Opt spec")
        if sum(opt.outputs for opt in self.specs.values()) > 1:
            raise ValueError(f"method {self.name!r}: at most one option sets the number of outputs")
        if self.make_drafter is not None:
            self._check_pairing()

    def _check_pairing(self) -> None:
        if not (isinstance(self.drafter, type) and issubclass(self.drafter, Drafter)):
            raise ValueError(f"method {self.name!r}: name the Drafter class make_drafter builds (drafter=...)")
        if (self.make_verifier is None) != (self.verifier is None):
            raise ValueError(f"method {self.name!r}: give make_verifier and the Verifier class it builds together")
        verifiers = [self.verifier] if self.verifier is not None else [GreedyVerifier, SampleMatchVerifier]
        for verifier in verifiers:
            if not (isinstance(verifier, type) and issubclass(verifier, Verifier)):
                raise ValueError(f"method {self.name!r}: verifier must be a Verifier class, got {verifier!r}")
            unknown = set(verifier.needs) - set(DRAFT_FIELDS) or set(self.drafter.provides) - set(DRAFT_FIELDS)
            if unknown:
                raise ValueError(f"method {self.name!r}: unknown Draft parts {sorted(unknown)}")
            missing = [name for name in verifier.needs if name not in self.drafter.provides]
            if missing:
                raise ValueError(f"method {self.name!r}: verifier {verifier.__name__} needs Draft "
                                 f"{', '.join(missing)}, which drafter {self.drafter.__name__} does not provide")

    @property
    def options(self) -> dict[str, Any]:
        """Option name -> default."""
        return {name: opt.default for name, opt in self.specs.items()}

    @property
    def outputs_option(self) -> Optional[str]:
        """The option that sets how many outputs a one-pass multi-output decoder returns, or None."""
        return next((name for name, opt in self.specs.items() if opt.outputs), None)

    def artifact_options(self, artifact: str) -> list[str]:
        """The options that name an `artifact` (e.g. "draft_model")."""
        return [name for name, opt in self.specs.items() if opt.artifact == artifact]

    def resolve_options(self, given: dict[str, Any], bounds: Optional[ServerBounds] = None,
                        arguments: Sequence[str] = ()) -> dict[str, Any]:
        """The defaults with `given` on top, checked (`bounds`: a server's, for the values an HTTP request gave; see
        method_options.check_value). `arguments`: the caller's own parameters, which a misspelled option may have
        meant (generate's max_new_tokens for max_tokens)."""
        renamed = sorted(set(given) & set(self.renamed_options))
        if renamed:
            raise InvalidOptionError(f"method {self.name!r} has no option {renamed[0]!r} any more: it is now "
                                     f"{self.renamed_options[renamed[0]]!r}")
        unknown = sorted(set(given) - set(self.specs), key=str)
        if unknown:
            valid = ", ".join(sorted(self.specs)) or "none"
            names = ", ".join(repr(name) + did_you_mean(name, [*self.specs, *arguments]) for name in unknown)
            raise InvalidOptionError(f"method {self.name!r} has no option {names}; its options are: {valid}")
        options = {**self.options, **_defaults_within_caps(self, given, bounds), **given}
        try:
            for name, opt in self.specs.items():    # integers first: the row's own checks may size lists by them
                if opt.kind == "int":               # (multi_draft's [1.0] * num_drafts)
                    check_value(name, options[name], opt, bounds if name in given else None)
            if self.check_options is not None:
                self.check_options(options)
            for name, opt in self.specs.items():
                if opt.kind != "int":
                    check_value(name, options[name], opt, bounds if name in given else None)   # a request's own
        except InvalidOptionError as exc:     # say which method, for the bench's METHOD.NAME=VALUE options
            raise type(exc)(f"method {self.name!r}: {exc}", param=exc.param or self._option_in(str(exc))) from None
        return options

    def _option_in(self, message: str) -> Optional[str]:
        """The option a check's message starts with ("rank_by must be ..."), for a server's answer, or None."""
        first = message.split(" ", 1)[0]
        return first if first in self.specs else None


def _defaults_within_caps(row, given: dict, bounds: Optional[ServerBounds]) -> dict:
    """The defaults a server's caps lower: a request that names no draft depth gets at most `serve
    --max-draft-tokens` too (suffix's 64-token default on a server capped at 16 drafts 16), as one naming it must."""
    if bounds is None:
        return {}
    lowered = {}
    for name, opt in row.specs.items():
        cap = bounds.limit(opt.cap)
        default = row.options.get(name)
        if name not in given and cap is not None and isinstance(default, int) and not isinstance(default, bool) \
                and default > cap:
            lowered[name] = cap
    return lowered


def _with_draft_model(method: str) -> Callable:
    def load(lm, options, artifacts):
        return {**options, "draft_model": resolve_draft_model(options["draft_model"], lm, method, artifacts)}
    return load


def _pld_plus_calibration(lm, options, artifacts):
    return pld_plus_calibration.resolve_options(lm, options)       # a small stored record, read per request


def _superposed_ngram(lm, options, artifacts):
    if options["alpha"] == 0:           # LM only: no n-gram file needed
        return options
    return {**options, "ngram": resolve_ngram(lm, options["ngram"], artifacts)}


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


# Specs shared by several rows. HTTP bounds are machine-sized; `cap` names the operator's limit (ServerConfig).
def _draft_tokens(default):
    return Opt(default, "int", low=1, cap="max_draft_tokens")


DRAFT_MODEL = Opt(None, "artifact", artifact="draft_model", help="a draft model alias/path or a loaded LM")
PROBABILITY = dict(kind="float", low=0.0, high=1.0)
STOP_BELOW = Opt(0.0, **PROBABILITY)
ADAPTIVE = Opt(False, "bool")
MAX_DRAFT_CHAINS = 1024            # multi_draft's chains in one library call: one tree row each per depth
SUPERPOSED_SPECS = {
    "num_drafts": Opt(SUPERPOSED_OPTIONS["num_drafts"], "int", low=1, outputs=True),
    "n_token_sample": Opt(None, "int", low=1, nullable=True, cap="max_tree_tokens"),
    "tau": Opt(SUPERPOSED_OPTIONS["tau"], "float", low=0.0, http_low=MIN_TEMPERATURE, http_high=100),
    "alpha": Opt(SUPERPOSED_OPTIONS["alpha"], **PROBABILITY),
    "ngram": Opt(None, "artifact", artifact="ngram", help="an n-gram file path or NGramModel"),
    "ngram_weights": Opt(SUPERPOSED_OPTIONS["ngram_weights"], "weights", http_high=1e6, http_items=16),
    "log_penalty": Opt(SUPERPOSED_OPTIONS["log_penalty"], "float", low=0.0, http_high=1e6),
    "first_step": Opt(SUPERPOSED_OPTIONS["first_step"], "enum", choices=FIRST_STEPS),
    "reset_every": Opt(None, "int", low=1, nullable=True, http_high=BIG),
    "reset_choice": Opt(SUPERPOSED_OPTIONS["reset_choice"], "enum", choices=RESET_CHOICES),
}
if set(SUPERPOSED_SPECS) != set(SUPERPOSED_OPTIONS):
    raise RuntimeError("the superposed row's specs and superposed.decoder.OPTIONS differ")

_ROWS = (
    Method("greedy", lossless=True, description="plain greedy decoding (argmax at every step)",
           make_drafter=make_no_drafter, drafter=NoDrafter),
    Method("sample", lossless=True, description="plain sampling with temperature, top-k and top-p",
           make_drafter=make_no_drafter, drafter=NoDrafter),
    Method("beam", lossless=False, description="beam search over the target model (a different decoder, not greedy)",
           specs={"num_beams": Opt(4, "int", low=1, cap="max_beams"),
                  "length_penalty": Opt(1.0, "float", http_low=-100, http_high=100)},
           run=run_beam),
    Method("pld", lossless=True,
           description="prompt lookup: drafts copied from the context after the trailing n-gram",
           specs={"max_ngram": Opt(3, "int", low=1, http_high=64), "num_draft_tokens": _draft_tokens(10),
                  "variant": Opt("hf", "enum", choices=PLD_VARIANTS)},
           make_drafter=make_pld_drafter, drafter=PromptLookupDrafter),
    Method("pld_plus", lossless=True,
           description="PLD+: prompt lookup ranked by the model's hidden states (rank_by='hidden') or induction-head "
                       "attention (rank_by='attention')",
           specs={"rank_by": Opt("hidden", "enum", choices=pld_plus.RANKERS),
                  "num_draft_tokens": _draft_tokens(pld_plus.DEFAULT_NUM_DRAFT_TOKENS),
                  "short_draft_tokens": Opt(pld_plus.DEFAULT_SHORT_DRAFT_TOKENS, "int", low=1, nullable=True,
                                            cap="max_draft_tokens"),
                  "layer": Opt(None, "int", low=1, nullable=True, http_high=BIG),
                  "theta": Opt(None, "float", nullable=True, http_low=-1, http_high=1),
                  "avg_window": Opt(1, "int", low=1, http_high=64),
                  "induction_heads": Opt(None, "induction_head_pairs", nullable=True, http_low=0, http_high=BIG,
                                             http_items=4096),
                  "num_induction_heads": Opt(50, "int", low=1, http_high=4096),
                  "induction_head_set": Opt("selected", "induction_head_set", http_items=15),
                  "aggregate": Opt("max", "enum", choices=pld_plus.AGGREGATES),
                  "scope": Opt("context", "enum", choices=PLD_PLUS_SCOPES)},
           make_drafter=pld_plus.make_drafter, drafter=PLDPlusDrafter, check_options=_check_pld_plus,
           load_artifacts=_pld_plus_calibration, renamed_options=PLD_PLUS_RENAMED),
    Method("suffix", lossless=True,
           description="SuffixDecoding: frequency-weighted draft trees from suffix automata over the context and an "
                       "optional cross-request store (store=multidraft.SuffixStore())",
           specs={"store": Opt(None, "object", http=False, why_not_http="the server keeps the suffix store itself "
                               "(multidraft serve --suffix-store-tokens, --suffix-isolation)"),
                  "max_draft_tokens": _draft_tokens(suffix.DEFAULT_MAX_DRAFT_TOKENS),
                  "alpha": Opt(suffix.DEFAULT_ALPHA, "float", low=0.0, http_high=1000),
                  "min_token_prob": Opt(suffix.DEFAULT_MIN_TOKEN_PROB, **PROBABILITY),
                  "use_context": Opt(True, "bool"),
                  "tree": Opt(True, "bool"),
                  "update_store": Opt(True, "bool", http=False,
                                      why_not_http="the server adds every finished request to its suffix store")},
           make_drafter=suffix.make_drafter, drafter=SuffixDrafter, check_options=suffix.check_options),
    Method("speculative", lossless=True,
           description="speculative sampling with a draft model (one chain of num_draft_tokens, rejection with the "
                       "residual; greedy match at temperature 0); lossless",
           specs={"draft_model": DRAFT_MODEL, "num_draft_tokens": _draft_tokens(4), "adaptive": ADAPTIVE,
                  "draft_temperature": Opt(None, "temperatures", nullable=True, http_high=100),
                  "stop_below": STOP_BELOW},
           make_drafter=draft_model_options.make_speculative_drafter, drafter=DraftModelDrafter,
           make_verifier=_speculative_verifier, verifier=MultiDraftVerifier,
           artifacts=("draft_model",), check_options=draft_model_options.check_options,
           load_artifacts=_with_draft_model("speculative")),
    Method("multi_draft", lossless=True,
           description="num_drafts chains from a draft model verified as one tree in one target forward, token "
                       f"chosen by a selection scheme ({', '.join(SELECTION_SCHEMES)}; is_lp_truncated is seed 002's 'IS'); "
                       "lossless",
           specs={"draft_model": DRAFT_MODEL, "num_drafts": Opt(2, "int", low=1, high=MAX_DRAFT_CHAINS,
                                                                    cap="max_drafts"),
                  "num_draft_tokens": _draft_tokens(4),
                  "selection": Opt("specinfer", "enum", choices=SELECTION_SCHEMES),
                  "draft_temperatures": Opt(None, "temperatures", nullable=True, http_high=100),
                  "selection_options": Opt(None, "object", nullable=True, http=False, why_not_http=(
                      "the selection scheme runs with its defaults on this server")),
                  "adaptive": ADAPTIVE, "stop_below": STOP_BELOW},
           make_drafter=draft_model_options.make_multi_draft_drafter, drafter=DraftModelDrafter,
           make_verifier=draft_model_options.make_multi_draft_verifier, verifier=MultiDraftVerifier,
           artifacts=("draft_model",), check_options=draft_model_options.check_options,
           load_artifacts=_with_draft_model("multi_draft")),
    Method("mtad", lossless=False,
           description="LOSSY multi-token assisted decoding: draft beam search, longest prefix whose target/draft "
                       "joint likelihood ratio passes accept_threshold, then one target token (biased toward high "
                       "likelihood, not the target's sampling law); at temperature 0 beam search over the unwarped draft "
                       "law (the paper's greedy-MTJD approximation), not greedy decoding",
           specs={"draft_model": DRAFT_MODEL, "num_beams": Opt(8, "int", low=1, cap="max_beams"),
                  "num_draft_tokens": _draft_tokens(4), "accept_threshold": Opt(0.1, **PROBABILITY),
                  "threshold_semantics": Opt("paper", "enum", choices=THRESHOLD_SEMANTICS),
                  "deterministic": Opt(False, "bool")},
           make_drafter=draft_model_options.make_mtad_drafter, drafter=BeamDrafter,
           make_verifier=_mtad_verifier, verifier=MTADVerifier,
           artifacts=("draft_model",), check_options=draft_model_options.check_options,
           load_artifacts=_with_draft_model("mtad")),
    Method("bild", lossless=False,
           description="LOSSY Big Little Decoder: the draft model writes until its top probability falls below "
                       "fallback_threshold (or max_draft_tokens), the target keeps the tokens before the first one "
                       "whose NLL exceeds rollback_threshold, then emits one token (not the target's sampling law)",
           specs={"draft_model": DRAFT_MODEL, "max_draft_tokens": _draft_tokens(10),
                  "fallback_threshold": Opt(0.9, **PROBABILITY),
                  "rollback_threshold": Opt(2.0, "float", low=0.0, http_high=1e6)},
           make_drafter=bild.make_drafter, drafter=BiLDDrafter, make_verifier=_bild_verifier, verifier=BiLDVerifier,
           artifacts=("draft_model",),
           check_options=bild.check_options, load_artifacts=_with_draft_model("bild")),
    Method("superposed", lossless=False,
           description="Superposed Decoding: k drafts from one forward pass per token, with n-gram interpolation "
                       "(a new decoder, lossy); drafts ranked in Generation.drafts",
           specs=SUPERPOSED_SPECS, run=run_superposed, artifacts=("ngram",), load_artifacts=_superposed_ngram,
           check_options=check_superposed),
    Method("blockwise", lossless=True,
           description="blockwise parallel decoding: trained heads draft a block, lattice of each head's top "
                       "lattice_k tokens rescored (none / ngram p-best DP / neural local with rescorer=LM), "
                       "p drafts verified as one tree (greedy only)",
           specs={"heads": Opt(None, "artifact", artifact="heads", help="a heads file path or BlockwiseHeads"),
                  "num_heads": Opt(None, "int", low=1, nullable=True, http_high=64),
                  "rescoring": Opt("ngram", "enum", choices=blockwise.RESCORINGS),
                  "lattice_k": Opt(8, "int", low=1, cap="max_lattice_k"),
                  "num_paths": Opt(2, "int", low=1, cap="max_drafts"),
                  "alpha": Opt(1.0, "float", low=0.0, http_high=100),
                  "ngram_order": Opt(3, "int", low=1, http_high=16),
                  "ngram_path": Opt(None, "object", nullable=True, http=False,
                                    why_not_http="name a file with 'ngram' instead"),
                  "ngram": Opt(None, "artifact", artifact="ngram", http_target="ngram_path",
                               help="a loaded NGramModel (the library), or the name of a registered file (HTTP)"),
                  "rescorer": Opt(None, "artifact", artifact="rescorer", help="a rescoring LM or its path")},
           make_drafter=blockwise.make_drafter, drafter=blockwise.BlockwiseDrafter, artifacts=("heads", "ngram"),
           check_options=blockwise.check_options, load_artifacts=blockwise_artifacts.resolve_options,
           greedy_only=True),
)

METHODS: dict[str, Method] = {method.name: method for method in _ROWS}
if len(METHODS) != len(_ROWS):
    raise RuntimeError("two rows of multidraft.methods share a method name")


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise UnknownMethodError(f"unknown method {name!r}{did_you_mean(name, METHODS)}; choose one of: "
                                 f"{', '.join(sorted(METHODS))}")
    return METHODS[name]


def available_methods() -> dict[str, Method]:
    return dict(METHODS)


def parse_cli_option(method: str, name: str, raw: str):
    """`-o NAME=VALUE` for `method`: typed by the method row's spec of NAME when there is one (a name the row lacks
    is refused later by resolve_options, with the row's list of options)."""
    row = METHODS.get(method)
    return parse_cli_value(name, raw, row.specs.get(name) if row is not None else None)
