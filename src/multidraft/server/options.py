"""Which method options a request may set, and how large: an allow-list, not a block-list.

The allow-list is derived from the method rows (multidraft.methods; each option's typed spec in
multidraft.method_options): a request may set an option whose spec says `http`, within the spec's HTTP bounds,
and the operator's caps (ServerConfig.max_beams, ...) bound the work one model step can take. Options that name
something on the server (n-gram files, trained heads, rescoring and draft models) are never paths: the request
sends a name the operator registered at `multidraft serve` time and the server substitutes the operator's value.
A new method's options are settable here as soon as its row has them. The library keeps accepting paths from its
own callers; this module is only the server's gate.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from multidraft.method_options import BIG, Opt
from multidraft.methods import Method, get_method
from multidraft.server.config import ServerConfig
from multidraft.server.schemas import ApiError
from multidraft.validation import MIN_TEMPERATURE

__all__ = ["BIG", "MIN_TEMPERATURE", "MIN_TOP_P", "http_options", "request_options", "default_artifact"]
MIN_TOP_P = 1e-5         # a top_p under this rounds to 0 in float32; top_k=1 is the way to ask for the top token only

ARTIFACT_FLAGS = {"ngram": "--ngram NAME=PATH", "heads": "--heads NAME=PATH", "rescorer": "--rescorer NAME=MODEL",
                  "draft_model": "--draft MODEL"}
ARTIFACT_WORDS = {"ngram": "an n-gram file", "heads": "a set of trained heads", "rescorer": "a rescoring model",
                  "draft_model": "a draft model"}


def http_options(method: Method) -> dict[str, Opt]:
    """The options of `method` a request may set (the number of outputs is set with 'n')."""
    return {name: opt for name, opt in method.specs.items() if opt.http and not opt.outputs}


def request_options(method: str, given: dict[str, Any], config: ServerConfig, n: int,
                    named: Optional[dict] = None) -> dict[str, Any]:
    """The library options for a request's method options: checked against the allow-list and the caps, with
    artifact names replaced by the operator's values (`named`: kind -> {name: value}, default config.artifacts).
    Raises ApiError(400) naming the option."""
    named = config.artifacts if named is None else named
    row = get_method(method)
    allowed = http_options(row)
    options: dict[str, Any] = {}
    for name, value in given.items():
        spec = allowed.get(name)
        if spec is None:
            settable = ", ".join(sorted(allowed)) or "none"
            known = row.specs.get(name)
            if known is not None and known.outputs:
                raise ApiError(400, f"set the number of drafts with 'n', not {name!r}", param=name)
            why = (known.why_not_http if known is not None else "") or "it is not settable per request on this server"
            raise ApiError(400, f"option {name!r} of method {method!r} cannot be set in a request: {why} "
                                f"(options a request may set for {method!r}: {settable})", param=name)
        if spec.kind == "artifact":
            resolved = _artifact(name, value, spec, named)
            if resolved is not None:
                options[spec.http_target or name] = resolved
            continue
        options[name] = _checked(name, value, spec, config)
    _check_sizes(row, options, config, n)
    return options


def default_artifact(kind: str, named: dict):
    """The operator's value used when a request names none (the first one registered), or None."""
    return next(iter((named.get(kind) or {}).values()), None)


def _artifact(name: str, value, spec: Opt, named: dict):
    named = named.get(spec.artifact) or {}
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
    low = -math.inf if spec.server_low is None else spec.server_low
    high = math.inf if spec.server_high is None else spec.server_high
    if spec.cap:
        high = min(high, getattr(config, spec.cap))
    if spec.kind == "int":
        return _number(name, value, low, high, integer=True, cap=spec.cap)
    if spec.kind == "float":
        return _number(name, value, low, high, cap=spec.cap)
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


def _check_sizes(row: Method, options: dict, config: ServerConfig, n: int) -> None:
    """Products of options that bound one request's work (each factor is already capped on its own)."""
    method, defaults = row.name, row.options

    def get(name):
        value = options.get(name, defaults.get(name))
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


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fmt(x: float) -> str:
    return "-inf" if x == -math.inf else "inf" if x == math.inf else f"{x:g}"
