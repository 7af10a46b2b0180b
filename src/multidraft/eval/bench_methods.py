"""Which columns a benchmark runs: registry methods (with presets: variants, temperature, tasks) and HF peers.

Methods come from the registry (`multidraft.methods.available_methods`), so a new method is benchmarked without
code changes; PRESETS only says how to run some of them (options to sweep, tasks they apply to).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from multidraft.errors import InvalidOptionError, UnknownMethodError
from multidraft.eval import llama_cpp_peer
from multidraft.eval.results import BASELINE

# k values swept for a one-pass multi-output decoder (its row's option with outputs=True: superposed's num_drafts).
SPD_K_VALUES = (2, 3, 4, 8)


# How to run registry methods in a benchmark. Keys: "variants" (list of option dicts, one row each),
# "temperature", "tasks" (tuple: only these tasks), "sweep_k" (superposed: sweep k over SPD_K_VALUES),
# "attention" (options -> the attention implementation the target needs, e.g. "eager" to return weights).
PRESETS: dict[str, dict[str, Any]] = {
    "sample": {"temperature": 1.0},
    # MTAD's joint-ratio test is about sampling: at temperature 0 both laws are one-hot and it is greedy
    # matching, so it runs sampled, beside `sample`, and its perplexity is the number to compare.
    "mtad": {"temperature": 1.0},
    # PLD+(a) runs on the default kernel too: the runner computes the heads' rows from queries and keys.
    "pld_plus": {"variants": [{"rank_by": "hidden"}, {"rank_by": "attention"}]},
    "superposed": {"tasks": ("autocomplete",), "sweep_k": True},
}
# Peers (other implementations on the same prompts): name -> (needs a draft model, description). The llama.cpp
# ones run llama-cpp-python on the model's GGUF (eval/llama_cpp_peer.py; optional extra `multidraft[llama]`).
PEERS: dict[str, tuple[bool, str]] = {
    "hf_greedy": (False, "HF generate(), greedy (the baseline)"),
    "hf_prompt_lookup": (False, "HF generate(prompt_lookup_num_tokens=k)"),
    "hf_assisted": (True, "HF generate(assistant_model=draft)"),
    "llama_cpp_greedy": (False, "llama.cpp (llama-cpp-python) greedy on the model's GGUF"),
    "llama_cpp_prompt_lookup": (False, "llama.cpp LlamaPromptLookupDecoding(num_pred_tokens=k) on the model's GGUF"),
}


@dataclass
class BenchMethod:
    """One column of the benchmark: a registry method (or HF peer) with fixed options."""

    label: str                       # unique row key, e.g. "pld_plus[rank_by=attention]"
    name: str                        # registry name or HF peer name
    peer: bool = False
    lossless: bool = True
    options: dict[str, Any] = field(default_factory=dict)
    temperature: Optional[float] = None
    tasks: Optional[tuple[str, ...]] = None   # None: every task
    needs_draft: bool = False
    attention: Optional[str] = None           # attention implementation to switch the target to for this method

    def applies_to(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks

    @property
    def sampled(self) -> bool:
        return bool(self.temperature)


def _label(name: str, variant: dict[str, Any]) -> str:
    return name + ("[" + ",".join(f"{k}={v}" for k, v in variant.items()) + "]" if variant else "")


def _expand(name: str, spec, overrides: dict[str, Any]) -> list[BenchMethod]:
    preset = PRESETS.get(name, {})
    variants = list(preset.get("variants", [{}]))
    if preset.get("sweep_k"):
        key = spec.outputs_option
        variants = [{key: k} for k in SPD_K_VALUES] if key else [{}]
    if any(key in overrides for variant in variants for key in variant):
        variants = [{}]          # the user fixed the swept option: one column
    needs_draft = "draft_model" in spec.options and spec.options.get("draft_model") is None
    methods = []
    for variant in variants:
        options = spec.resolve_options({**variant, **overrides})   # InvalidOptionError on unknown options
        options = {k: v for k, v in options.items() if k != "draft_model"}
        attention = preset["attention"](options) if "attention" in preset else None
        methods.append(BenchMethod(_label(name, variant), name, False, bool(spec.lossless), options,
                                   preset.get("temperature"), preset.get("tasks"), needs_draft, attention))
    return methods


# generate() keyword arguments a peer accepts through -o (HF's defaults otherwise, i.e. what users get); the
# llama.cpp peers take LlamaPromptLookupDecoding's arguments.
PEER_OPTIONS = {"hf_greedy": (), "hf_prompt_lookup": ("prompt_lookup_num_tokens", "max_matching_ngram_size"),
                "hf_assisted": ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"),
                **llama_cpp_peer.OPTIONS}


def _peer(name: str, overrides: dict[str, Any], registry) -> BenchMethod:
    if llama_cpp_peer.is_llama_cpp(name):
        # Not lossless: llama.cpp quantizes activations to 8 bits, so its tokens may differ from greedy's (reported,
        # not required to match).
        pld = registry.get("pld")
        options = llama_cpp_peer.peer_options(name, overrides, pld.options.get("num_draft_tokens", 10) if pld else 10)
        return BenchMethod(name, name, True, False, options, None, None, False)
    options: dict[str, Any] = {}
    if name == "hf_prompt_lookup":      # HF has no default; use pld's draft length so the two compare like for like
        pld = registry.get("pld")
        options["prompt_lookup_num_tokens"] = pld.options.get("num_draft_tokens", 10) if pld else 10
    unknown = sorted(set(overrides) - set(PEER_OPTIONS[name]))
    if unknown:
        raise InvalidOptionError(f"{name} has no option {', '.join(map(repr, unknown))}; its options are: "
                                 f"{', '.join(PEER_OPTIONS[name]) or 'none'}")
    options.update(overrides)
    return BenchMethod(name, name, True, True, options, None, None, PEERS[name][0])


def resolve_methods(requested: Iterable[str], has_draft: bool, overrides: Optional[dict[str, dict]] = None,
                    model: Optional[str] = None, baseline: str = BASELINE) -> tuple[list[BenchMethod], dict[str, str]]:
    """The methods to run, `baseline` first (then our greedy), and {name: reason} for those skipped.

    `requested` holds registry or peer names, or "all". A method that needs a draft model without one is an error
    when named, and skipped under "all". With `model`, the llama.cpp peers are checked too: skipped when the model
    has no GGUF; without llama-cpp-python skipped under "all", and run when named (each row then fails with the
    install hint, beside the other rows).
    """
    from multidraft.methods import available_methods       # lazily: the report reads this module too

    registry = available_methods()
    overrides = dict(overrides or {})
    requested = [r.strip() for r in requested if r.strip()]
    if not requested:
        raise InvalidOptionError("no methods given; pass --methods all or a comma-separated list")
    everything = "all" in requested
    names = list(registry) + list(PEERS) if everything else list(dict.fromkeys(requested))
    for name in names + list(overrides):
        if name != "all" and name not in registry and name not in PEERS:
            raise UnknownMethodError(f"unknown method {name!r}; choose from: all, "
                                     f"{', '.join(sorted(registry) + list(PEERS))}")
    for name in overrides:
        if name not in names and name != baseline:
            raise InvalidOptionError(f"options given for {name!r}, which is not among the methods benchmarked")
    # Our greedy right after the baseline: the reference every lossless method of ours is checked against
    first = [baseline] + (["greedy"] if "greedy" in names and baseline != "greedy" else [])
    names = first + [n for n in names if n not in first + ["all"]]
    methods: list[BenchMethod] = []
    skipped: dict[str, str] = {}
    for name in names:
        expanded = ([_peer(name, overrides.get(name, {}), registry)] if name in PEERS
                    else _expand(name, registry[name], overrides.get(name, {})))
        if expanded[0].needs_draft and not has_draft:
            if not everything:
                raise InvalidOptionError(f"method {name!r} needs a draft model; pass --draft ALIAS "
                                         f"(a smaller model with the same tokenizer, e.g. qwen2.5-coder-0.5b)")
            skipped[name] = "needs --draft"
            continue
        if model is not None and llama_cpp_peer.is_llama_cpp(name):
            reason = llama_cpp_peer.skip_reason(model, required=not everything)
            if reason:
                skipped[name] = reason
                continue
        methods.extend(expanded)
    return methods, skipped
