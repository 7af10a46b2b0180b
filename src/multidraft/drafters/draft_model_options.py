"""Options of the helper-model methods (`speculative`, `multi_draft`, `mtad`): the checks that need no model, and
the factories methods.py wires into its rows. The factories receive options["draft_model"] as a ready `LM`
(methods.py resolves it with multidraft.models.draft_models first) and build the drafter or verifier.
"""

from __future__ import annotations

import os

from multidraft.drafters.draft_model import BeamDrafter, DraftModelDrafter
from multidraft.errors import InvalidOptionError
from multidraft.models.runner import LM
from multidraft.validation import MIN_TEMPERATURE
from multidraft.verify.mtad import check_threshold
from multidraft.verify.multi_draft import SELECTION_SCHEMES, MultiDraftVerifier


def positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOptionError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def draft_temperature_list(value, num_drafts: int, target_temperature: float,
                           name: str = "draft_temperatures") -> list[float]:
    """None: the target's temperature for every draft, except when the target is greedy and K > 1, where drafts
    sample at 1.0 (K identical argmax chains would coincide). A number: every draft. A list: one per draft."""
    if value is None:
        if target_temperature == 0 and num_drafts > 1:
            return [1.0] * num_drafts
        return [float(target_temperature)] * num_drafts
    scalar = isinstance(value, (int, float)) and not isinstance(value, bool)
    values = [value] if scalar else value                   # one number checked once, copied only when valid
    if not isinstance(values, (list, tuple)) or (not scalar and len(values) != num_drafts):
        raise InvalidOptionError(f"draft_temperatures must be a number or a list of num_drafts = {num_drafts} "
                                 f"numbers, got {value!r}", param=name)
    for temperature in values:
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
                temperature == 0 or MIN_TEMPERATURE <= temperature < float("inf")):   # floor: finite probabilities
            raise InvalidOptionError(f"draft temperatures must be numbers >= 0 (0 = argmax, else at least "
                                     f"{MIN_TEMPERATURE}), got {value!r}", param=name)
    return [float(value)] * num_drafts if scalar else [float(t) for t in values]


def _make_chain_drafter(lm, sampler, options, num_drafts, draft_temperatures):
    params = sampler.params
    temperatures = draft_temperature_list(draft_temperatures, num_drafts, params.temperature)
    return DraftModelDrafter(options["draft_model"], num_drafts, options["num_draft_tokens"], temperatures,
                             params.top_k, params.top_p, options["adaptive"], stop_below=float(options["stop_below"]))


def check_stop_below(stop_below) -> float:
    if isinstance(stop_below, bool) or not isinstance(stop_below, (int, float)) or not 0 <= stop_below <= 1:
        raise InvalidOptionError(f"stop_below must be a probability in [0, 1] (0 = never stop early), "
                                 f"got {stop_below!r}")
    return float(stop_below)


def make_speculative_drafter(lm, sampler, options):
    return _make_chain_drafter(lm, sampler, options, 1, options["draft_temperature"])


def make_multi_draft_drafter(lm, sampler, options):
    drafter = _make_chain_drafter(lm, sampler, options, options["num_drafts"], options["draft_temperatures"])
    # Needs the target's temperature (the default draft temperatures follow it): checked here, not up front.
    if options["selection"] == "spectr" and len({p.temperature for p in drafter.draft_params}) > 1:
        raise InvalidOptionError("selection='spectr' needs identical drafts; give every draft the same temperature "
                                 "or use selection='specinfer' or an 'is*' scheme")
    return drafter


def make_multi_draft_verifier(lm, sampler, options):
    return MultiDraftVerifier(options["selection"], **(options["selection_options"] or {}))


def make_mtad_drafter(lm, sampler, options):
    return BeamDrafter(options["draft_model"], options["num_beams"], options["num_draft_tokens"], sampler.params,
                       options["deterministic"])


def _check_selection(options) -> None:
    selection = options["selection"]
    if selection not in SELECTION_SCHEMES:
        raise InvalidOptionError(f"selection must be one of {', '.join(SELECTION_SCHEMES)}, got {selection!r}")
    selection_options = options["selection_options"] or {}
    if not isinstance(selection_options, dict):
        raise InvalidOptionError(f"selection_options must be a dict (e.g. {{'s': 5, 'alphabet_size': 40}}), "
                                 f"got {selection_options!r}")
    from multidraft.selection.schemes import SCHEME_OPTIONS
    unknown = sorted(set(selection_options) - set(SCHEME_OPTIONS[selection]))
    if unknown:
        raise InvalidOptionError(f"selection {selection!r} takes no option(s) {unknown}; it accepts: "
                                 f"{', '.join(sorted(SCHEME_OPTIONS[selection])) or 'none'}")


def check_options(options: dict) -> None:
    """The checks of the three methods below that need no model, run once (Method.resolve_options) before any model
    is loaded; the factories then trust their options."""
    draft_model = options["draft_model"]
    if draft_model is not None and not isinstance(draft_model, (str, os.PathLike, LM)):
        raise InvalidOptionError(f"draft_model must be an LM (multidraft.load_model(...)) or a model alias/path, "
                                 f"got {type(draft_model).__name__}")
    positive_int("num_draft_tokens", options["num_draft_tokens"])
    num_drafts = positive_int("num_drafts", options["num_drafts"]) if "num_drafts" in options else 1
    if "selection" in options:
        _check_selection(options)
    for name in ("draft_temperature", "draft_temperatures"):
        if options.get(name) is not None:                  # None: nothing to check (no list of num_drafts built)
            draft_temperature_list(options[name], num_drafts, 0.0, name)
    if "num_beams" in options:
        positive_int("num_beams", options["num_beams"])
        check_threshold(options["accept_threshold"], options["threshold_semantics"])
    if "stop_below" in options:
        check_stop_below(options["stop_below"])
    for name in ("adaptive", "deterministic"):
        if name in options and not isinstance(options[name], bool):
            raise InvalidOptionError(f"{name} must be True or False, got {options[name]!r}")
