"""Which method options a request may set, and how large: an allow-list, not a block-list.

A request may set numbers, booleans and enum strings, each within a bound; the operator's caps
(ServerConfig.max_beams, ...) bound the work one model step can take. Options that name something on the
server (n-gram files, trained heads, rescoring and draft models) are never paths: the request sends a name
the operator registered at `multidraft serve` time and the server substitutes the operator's value. A method
missing from REQUEST_OPTIONS (one added later) runs with its defaults until its options are listed here.
The library keeps accepting paths from its own callers; this module is only the server's gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from multidraft.server.config import ServerConfig
from multidraft.server.schemas import ApiError

# Below MIN_TEMPERATURE, logits / temperature overflows float32 (1e-300 gives inf/nan probabilities) and the
# temperature is greedy in all but name: a request must say 0. The library (multidraft.validation, issue #16)
# uses the same floor, so the server and the library say the same thing. A top_p under MIN_TOP_P rounds to 0 in
# float32; top_k=1 is the way to ask for the top token only.
MIN_TEMPERATURE = 1e-2
MIN_TOP_P = 1e-5
BIG = 1_000_000          # a bound for integers that have no natural cap (steps, layers): keeps them machine-sized


@dataclass(frozen=True)
class Opt:
    # int | float | bool | enum | temperatures | weights | induction_head_pairs | induction_head_set | artifact
    kind: str
    low: float = -math.inf
    high: float = math.inf
    cap: Optional[str] = None        # a ServerConfig field bounding the value from above
    nullable: bool = False
    choices: tuple = ()
    artifact: Optional[str] = None   # for kind "artifact": which registry (ServerConfig.artifacts)
    target: Optional[str] = None     # for kind "artifact": the library option that receives the value


DRAFT_TOKENS = Opt("int", 1, cap="max_draft_tokens")
DRAFT_MODEL = Opt("artifact", artifact="draft_model")
NGRAM_SUPERPOSED = Opt("artifact", artifact="ngram", target="ngram")
NGRAM_BLOCKWISE = Opt("artifact", artifact="ngram", target="ngram_path")

REQUEST_OPTIONS: dict[str, dict[str, Opt]] = {
    "greedy": {},
    "sample": {},
    "beam": {"num_beams": Opt("int", 1, cap="max_beams"), "length_penalty": Opt("float", -100, 100)},
    "pld": {"max_ngram": Opt("int", 1, 64), "num_draft_tokens": DRAFT_TOKENS,
            "variant": Opt("enum", choices=("hf", "reference"))},
    "pld_plus": {"rank_by": Opt("enum", choices=("hidden", "attention", "first")), "num_draft_tokens": DRAFT_TOKENS,
                 "short_draft_tokens": Opt("int", 1, cap="max_draft_tokens", nullable=True),
                 "layer": Opt("int", 0, BIG, nullable=True), "theta": Opt("float", -1, 1, nullable=True),
                 "avg_window": Opt("int", 1, 64), "induction_heads": Opt("induction_head_pairs", nullable=True),
                 "num_induction_heads": Opt("int", 1, 4096), "induction_head_set": Opt("induction_head_set"),
                 "aggregate": Opt("enum", choices=("max", "sum")), "scope": Opt("enum", choices=("context", "prompt"))},
    "suffix": {"max_draft_tokens": DRAFT_TOKENS, "alpha": Opt("float", 0, 1000),
               "min_token_prob": Opt("float", 0, 1), "use_context": Opt("bool")},
    "bild": {"draft_model": DRAFT_MODEL, "max_draft_tokens": DRAFT_TOKENS, "fallback_threshold": Opt("float", 0, 1),
             "rollback_threshold": Opt("float", 0, 1e6)},
    "speculative": {"draft_model": DRAFT_MODEL, "num_draft_tokens": DRAFT_TOKENS, "adaptive": Opt("bool"),
                    "draft_temperature": Opt("temperatures", nullable=True), "stop_below": Opt("float", 0, 1)},
    "multi_draft": {"draft_model": DRAFT_MODEL, "num_drafts": Opt("int", 1, cap="max_drafts"),
                    "num_draft_tokens": DRAFT_TOKENS,
                    "selection": Opt("enum", choices=("specinfer", "spectr", "is", "is_lp", "is_lp_truncated")),
                    "draft_temperatures": Opt("temperatures", nullable=True), "adaptive": Opt("bool"),
                    "stop_below": Opt("float", 0, 1)},
    "mtad": {"draft_model": DRAFT_MODEL, "num_beams": Opt("int", 1, cap="max_beams"), "num_draft_tokens": DRAFT_TOKENS,
             "accept_threshold": Opt("float", 0, 1), "threshold_semantics": Opt("enum", choices=("paper", "strict")),
             "deterministic": Opt("bool")},
    "superposed": {"n_token_sample": Opt("int", 1, cap="max_tree_tokens", nullable=True),
                   "tau": Opt("float", MIN_TEMPERATURE, 100), "alpha": Opt("float", 0, 1), "ngram": NGRAM_SUPERPOSED,
                   "ngram_weights": Opt("weights"), "log_penalty": Opt("float", 0, 1e6),
                   "first_step": Opt("enum", choices=("interpolated", "lm_only")),
                   "reset_every": Opt("int", 1, BIG, nullable=True),
                   "reset_choice": Opt("enum", choices=("sample", "argmax"))},
    "blockwise": {"heads": Opt("artifact", artifact="heads", target="heads"), "num_heads": Opt("int", 1, 64, nullable=True),
                  "rescoring": Opt("enum", choices=("none", "neural", "ngram")),
                  "lattice_k": Opt("int", 1, cap="max_lattice_k"), "num_paths": Opt("int", 1, cap="max_drafts"),
                  "alpha": Opt("float", 0, 100), "ngram_order": Opt("int", 1, 16), "ngram": NGRAM_BLOCKWISE,
                  "rescorer": Opt("artifact", artifact="rescorer", target="rescorer")},
}

# Library options a request can never set, with what to do instead.
INSTEAD = {"ngram_path": "name a file with 'ngram' instead",
           "selection_options": "the selection scheme runs with its defaults on this server",
           "store": "the server keeps the suffix store itself (multidraft serve --suffix-store-tokens, --suffix-isolation)",
           "update_store": "the server adds every finished request to its suffix store",
           "draft": "name a draft model with 'draft_model'", "draft_lm": "name a draft model with 'draft_model'"}

ARTIFACT_FLAGS = {"ngram": "--ngram NAME=PATH", "heads": "--heads NAME=PATH", "rescorer": "--rescorer NAME=MODEL",
                  "draft_model": "--draft MODEL"}
ARTIFACT_WORDS = {"ngram": "an n-gram file", "heads": "a set of trained heads", "rescorer": "a rescoring model",
                  "draft_model": "a draft model"}


def request_options(method: str, given: dict[str, Any], config: ServerConfig, n: int) -> dict[str, Any]:
    """The library options for a request's method options: checked against the allow-list and the caps, with
    artifact names replaced by the operator's values. Raises ApiError(400) naming the option."""
    allowed = REQUEST_OPTIONS.get(method, {})
    options: dict[str, Any] = {}
    for name, value in given.items():
        spec = allowed.get(name)
        if spec is None:
            settable = ", ".join(sorted(allowed)) or "none"
            why = INSTEAD.get(name, "it is not settable per request on this server")
            raise ApiError(400, f"option {name!r} of method {method!r} cannot be set in a request: {why} "
                                f"(options a request may set for {method!r}: {settable})", param=name)
        if spec.kind == "artifact":
            resolved = _artifact(name, value, spec, config)
            if resolved is not None:
                options[spec.target or name] = resolved
            continue
        options[name] = _checked(name, value, spec, config)
    _check_sizes(method, options, config, n)
    return options


def default_artifact(kind: str, config: ServerConfig):
    """The operator's value used when a request names none (the first one registered), or None."""
    named = config.artifacts.get(kind) or {}
    return next(iter(named.values()), None)


def _artifact(name: str, value, spec: Opt, config: ServerConfig):
    named = config.artifacts.get(spec.artifact) or {}
    words, flag = ARTIFACT_WORDS[spec.artifact], ARTIFACT_FLAGS[spec.artifact]
    if value is None or value == "default":
        return None                   # the operator's default (the library's default file, or the first registered)
    if isinstance(value, str) and value in named:
        return named[value]
    offered = ", ".join(repr(n) for n in ["default", *named])
    shown = repr(value) if isinstance(value, str) and len(value) <= 80 else type(value).__name__
    raise ApiError(400, f"{name!r} names {words} by one of the names this server offers: {offered}; got {shown}. "
                        f"Requests cannot give paths or models; the operator registers them with "
                        f"`multidraft serve {flag}`", param=name, code="unknown_artifact")


def _checked(name: str, value, spec: Opt, config: ServerConfig):
    if value is None:
        if spec.nullable:
            return None
        raise ApiError(400, f"option {name!r} cannot be null", param=name)
    high = min(spec.high, getattr(config, spec.cap)) if spec.cap else spec.high
    if spec.kind == "int":
        return _number(name, value, spec.low, high, integer=True, cap=spec.cap)
    if spec.kind == "float":
        return _number(name, value, spec.low, high, cap=spec.cap)
    if spec.kind == "bool":
        if not isinstance(value, bool):
            raise ApiError(400, f"option {name!r} must be true or false, got {_show(value)}", param=name)
        return value
    if spec.kind == "enum":
        if not isinstance(value, str) or value not in spec.choices:
            raise ApiError(400, f"option {name!r} must be one of {', '.join(map(repr, spec.choices))}, got "
                                f"{_show(value)}", param=name)
        return value
    if spec.kind == "temperatures":          # one draft temperature, or one per draft chain
        if isinstance(value, list):
            if not 1 <= len(value) <= config.max_drafts:
                raise ApiError(400, f"option {name!r} must hold 1..{config.max_drafts} temperatures", param=name)
            return [_temperature(name, v) for v in value]
        return _temperature(name, value)
    if spec.kind == "weights":               # superposed n-gram interpolation weights
        if not isinstance(value, list) or not 1 <= len(value) <= 16:
            raise ApiError(400, f"option {name!r} must be a list of 1..16 numbers", param=name)
        return [_number(name, v, 0, 1e6) for v in value]
    if spec.kind == "induction_head_pairs":  # explicit PLD+ induction heads: numbers, not a calibration file
        if not isinstance(value, list) or not 1 <= len(value) <= 4096 or not all(
                isinstance(p, list) and len(p) == 2 for p in value):
            raise ApiError(400, f"option {name!r} must be a list of [layer, head] integer pairs", param=name)
        return [[_number(name, x, 0, BIG, integer=True) for x in pair] for pair in value]
    if spec.kind == "induction_head_set":
        ok = isinstance(value, str) and (value in ("selected", "all") or (
            value.startswith("layer:") and value[6:].isdigit() and len(value) < 16))
        if not ok:
            raise ApiError(400, f"option {name!r} must be 'selected', 'all' or 'layer:<l>', got {_show(value)}",
                           param=name)
        return value
    raise AssertionError(spec.kind)


def _temperature(name: str, value) -> float:
    value = _number(name, value, 0, 100)
    if 0 < value < MIN_TEMPERATURE:
        raise ApiError(400, f"option {name!r} must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, got {value!r}",
                       param=name)
    return value


def _number(name: str, value, low: float, high: float, integer: bool = False, cap: Optional[str] = None):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise ApiError(400, f"option {name!r} must be {'an integer' if integer else 'a number'}, got {_show(value)}",
                       param=name)
    if not math.isfinite(value) or not low <= value <= high:
        limit = f" (this server's limit: serve --{cap.replace('_', '-')})" if cap else ""
        raise ApiError(400, f"option {name!r} must be between {_fmt(low)} and {_fmt(high)}{limit}, got {value!r}",
                       param=name, code="limit_exceeded" if cap and value > high else None)
    return value


def _check_sizes(method: str, options: dict, config: ServerConfig, n: int) -> None:
    """Products of options that bound one request's work (each factor is already capped on its own)."""
    def get(name):
        default = _library_default(method, name)
        value = options.get(name, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else 1

    def refuse(what: str, size: int, cap: str):
        raise ApiError(400, f"{what} is {size}; this server allows at most {getattr(config, cap)} "
                            f"(serve --{cap.replace('_', '-')})", param=None, code="limit_exceeded")

    if method == "multi_draft":
        if n * get("num_drafts") > config.max_drafts:
            refuse("n x num_drafts", n * get("num_drafts"), "max_drafts")
        if get("num_drafts") * get("num_draft_tokens") > config.max_tree_tokens:
            refuse("num_drafts x num_draft_tokens", get("num_drafts") * get("num_draft_tokens"), "max_tree_tokens")
    if method == "mtad" and get("num_beams") * get("num_draft_tokens") > config.max_tree_tokens:
        refuse("num_beams x num_draft_tokens", get("num_beams") * get("num_draft_tokens"), "max_tree_tokens")
    if method == "blockwise" and get("lattice_k") * get("num_paths") > config.max_tree_tokens:
        refuse("lattice_k x num_paths", get("lattice_k") * get("num_paths"), "max_tree_tokens")


def _library_default(method: str, name: str):
    from multidraft.methods import get_method
    try:
        return get_method(method).options.get(name)
    except Exception:
        return None


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fmt(x: float) -> str:
    return "-inf" if x == -math.inf else "inf" if x == math.inf else f"{x:g}"
