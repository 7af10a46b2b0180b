"""Typed option specs: what a method row says about each of its options, once.

A `Method` row (multidraft.methods) holds one `Opt` per option: its default, its type, its bounds, whether an
HTTP request may set it (and the server's own machine-sized bounds and caps), whether it names an artifact, and
whether it sets the number of outputs. Everything else is derived from these rows: the library's per-option
checks (`check_value`), the CLI's `-o NAME=VALUE` parsing (`parse_cli_value`), `multidraft methods` (`describe`),
and the server's allow-list (multidraft.server.options). A new method's options appear everywhere by adding its row.

Checks that relate several options (n_token_sample >= num_drafts) or need more than a type and a range stay in the
row's `check_options`, which runs first so that its messages (they say what the option means) win.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from multidraft import validation
from multidraft.errors import InvalidOptionError

# "object" is any Python value the library takes from its own callers (a store, a dict of scheme settings, a path);
# the other special kinds are typed lists (and a head-set name) whose content the row's check_options checks; with a
# server's bounds, check_value bounds their size too (how many entries, how large each).
SCALAR_KINDS = ("int", "float", "bool", "enum")
KINDS = SCALAR_KINDS + ("temperatures", "weights", "induction_head_pairs", "induction_head_set", "artifact", "object")
BIG = validation.BIG_INT  # a bound for integers that have no natural cap (steps, layers): keeps them machine-sized


@dataclass(frozen=True)
class Opt:
    default: Any
    kind: str
    low: Optional[float] = None         # inclusive bounds the library checks (None: unbounded)
    high: Optional[float] = None
    nullable: bool = False              # None is a valid value (it means "automatic")
    choices: tuple = ()                 # for kind "enum"
    http: bool = True                   # may an HTTP request set it
    why_not_http: str = ""              # for http=False: what a request does instead
    http_low: Optional[float] = None    # the server's bounds when tighter than the library's (machine-sized work)
    http_high: Optional[float] = None
    http_items: Optional[int] = None    # list kinds over HTTP: the most entries (induction_head_set: characters)
    cap: Optional[str] = None           # a ServerConfig field bounding it from above over HTTP
    artifact: Optional[str] = None      # a key of multidraft.methods.ARTIFACTS: the value names that artifact
    http_target: Optional[str] = None   # the library option that receives the server's value for the artifact name
    outputs: bool = False               # it sets the number of outputs of a one-pass multi-output decoder
    help: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown option kind {self.kind!r}; kinds are {', '.join(KINDS)}")
        if (self.kind == "enum") != bool(self.choices):
            raise ValueError("an enum option needs choices, and only an enum has them")
        if (self.kind == "artifact") != (self.artifact is not None):
            raise ValueError("an artifact option names its artifact, and only an artifact option does")

    @property
    def server_low(self) -> Optional[float]:
        return self.low if self.http_low is None else self.http_low

    @property
    def server_high(self) -> Optional[float]:
        return self.high if self.http_high is None else self.http_high


def check_value(name: str, value, opt: Opt, bounds: Optional[validation.ServerBounds] = None) -> None:
    """The type and range of one option as the library takes it (scalar kinds; the others' content is the row's).
    With a server's `bounds` (an HTTP request), within the spec's HTTP bounds and the server's cap as well: the same
    check and wording, the bound's origin added (ServerBounds.hint); a list kind's size is bounded then too."""
    if value is None and opt.nullable:
        return
    low, high, hint, cap = opt.low, opt.high, "", None
    if bounds is not None:
        low, high = opt.server_low, opt.server_high
        cap = bounds.limit(opt.cap)
        if cap is not None and (high is None or cap < high):
            high = cap
        if (low, high) != (opt.low, opt.high):
            hint = validation.ServerBounds.hint(opt.cap if cap is not None and high == cap else None)
    with validation.past_cap(name, value, cap):          # names the option (`param`) for a server's answer
        _check_in(name, value, opt, low, high, hint, bounds is not None)


def _check_in(name: str, value, opt: Opt, low, high, hint: str, http: bool) -> None:
    if opt.kind == "int":
        validation.integer(name, value, minimum=_int_or_none(low), maximum=_int_or_none(high),
                           allow_none=opt.nullable, hint=hint)
    elif opt.kind == "float":
        validation.number(name, value, minimum=low, maximum=high, allow_none=opt.nullable, hint=hint)
    elif opt.kind == "bool":
        validation.boolean(name, value)
    elif opt.kind == "enum":
        validation.choice(name, value, opt.choices, allow_none=opt.nullable)
    elif http and opt.kind in ("temperatures", "weights", "induction_head_pairs", "induction_head_set"):
        _check_size(name, value, opt, low, high)


def _check_size(name: str, value, opt: Opt, low, high) -> None:
    """What an HTTP request may send of a list kind (its content was checked by the row): at most http_items
    entries (characters of a head-set name), each number within the HTTP bounds."""
    hint = validation.ServerBounds.hint()
    if opt.http_items is not None and isinstance(value, (list, tuple, str)) and len(value) > opt.http_items:
        what = "characters" if isinstance(value, str) else "entries"
        raise InvalidOptionError(f"{name} must hold at most {opt.http_items} {what}{hint}, got {len(value)}")
    if isinstance(value, (list, tuple)):
        entries = [x for entry in value for x in (entry if isinstance(entry, (list, tuple)) else [entry])]
    else:
        entries = [] if isinstance(value, str) else [value]
    for entry in entries:
        validation.number(f"each {name} entry", entry, minimum=low, maximum=high, hint=hint)


def _int_or_none(bound):
    return None if bound is None else int(bound)


def parse_cli_value(name: str, raw: str, opt: Optional[Opt]):
    """A `-o NAME=VALUE` value as its option's type: integers, numbers and booleans parsed, enum names kept as
    text, "null"/"none" for a nullable option; other kinds (lists, paths) as JSON when it parses, else the text.
    Text that is not of the type stays text, so the row's check refuses it with the same words as everywhere."""
    if opt is not None and opt.nullable and raw.strip().lower() in ("null", "none"):
        return None
    kind = opt.kind if opt is not None else None
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        return raw
    if kind == "bool":
        word = raw.strip().lower()
        return {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}.get(word, raw)
    if kind in ("enum", "induction_head_set", "artifact"):
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def describe(opt: Opt) -> str:
    """One short line for `multidraft methods` and the docs: type, bounds, default, HTTP."""
    if opt.kind == "enum":
        kind = "|".join(opt.choices)
    elif opt.kind == "artifact":
        kind = f"name of {opt.artifact}"
    else:
        kind = opt.kind
    if opt.low is not None or opt.high is not None:
        low = "" if opt.low is None else f"{opt.low:g}"
        high = "" if opt.high is None else f"{opt.high:g}"
        kind += f" {low}..{high}"
    if opt.nullable:
        kind += " or None"
    flags = [] if opt.http else ["library only"]
    if opt.outputs:
        flags.append("number of outputs")
    return f"{kind}, default {opt.default!r}" + (f" ({', '.join(flags)})" if flags else "")
