"""Which method options a request may set, and how large: an allow-list, not a block-list.

The allow-list is derived from the method rows (multidraft.methods; each option's typed spec in
multidraft.method_options): a request may set an option whose spec says `http`. Its value is checked by the library
(Request.build with the server's bounds: the spec's HTTP bounds and the operator's caps, ServerConfig.max_beams,
..., which bound the work one model step can take), in the library's words; `check_sizes` bounds products of
options. Options that name something on the server (n-gram files, trained heads, rescoring and draft models) are
never paths: the request sends a name the operator registered at `multidraft serve` time and the server substitutes
the operator's value.
A new method's options are settable here as soon as its row has them. The library keeps accepting paths from its
own callers; this module is only the server's gate.
"""

from __future__ import annotations

from typing import Any, Optional

from multidraft.method_options import Opt
from multidraft.methods import Method, get_method
from multidraft.server.config import ServerConfig
from multidraft.server.schemas import ApiError

ARTIFACT_FLAGS = {"ngram": "--ngram NAME=PATH", "heads": "--heads NAME=PATH", "rescorer": "--rescorer NAME=MODEL",
                  "draft_model": "--draft MODEL"}
ARTIFACT_WORDS = {"ngram": "an n-gram file", "heads": "a set of trained heads", "rescorer": "a rescoring model",
                  "draft_model": "a draft model"}


def http_options(method: Method) -> dict[str, Opt]:
    """The options of `method` a request may set (the number of outputs is set with 'n')."""
    return {name: opt for name, opt in method.specs.items() if opt.http and not opt.outputs}


def request_options(method: str, given: dict[str, Any], config: ServerConfig,
                    named: Optional[dict] = None) -> dict[str, Any]:
    """The library options for a request's method options: checked against the allow-list, with artifact names
    replaced by the operator's values (`named`: kind -> {name: value}, default config.artifacts). Raises
    ApiError(400) naming the option. Values are checked by the library (Request.build with the server's bounds),
    then their products by `check_sizes`."""
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
        options[name] = value             # its type and range: the library's check, with the server's bounds
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


def check_sizes(row: Method, options: dict, config: ServerConfig, n: int) -> None:
    """Products of a request's resolved options that bound its work (each factor is already capped on its own by
    the library's check with the server's bounds)."""
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
