"""The typed option specs on the method rows (issue #30): the server's allow-list, the CLI's -o parsing and
`multidraft methods` are derived from them, so every option of every row reaches each of them."""

import math

import pytest

from multidraft.errors import InvalidOptionError, ServerLimitError
from multidraft.method_options import SCALAR_KINDS, Opt, parse_cli_value
from multidraft.methods import METHODS, parse_cli_option
from multidraft.server.config import ServerConfig
from multidraft.server.options import http_options, request_options
from multidraft.server.schemas import ApiError

SERVER_KINDS = SCALAR_KINDS + ("temperatures", "weights", "induction_head_pairs", "induction_head_set", "artifact")
CONFIG = ServerConfig(artifacts={"draft_model": {"tiny": "DRAFT"}, "ngram": {"corpus": "/srv/ngram.bin"},
                                 "heads": {"mine": "/srv/heads.pt"}, "rescorer": {"small": "RESCORER"}}).validate()
ROWS = sorted(METHODS.items())


def sample_value(opt: Opt):
    """A value a request may send for `opt`, inside its HTTP bounds and the default caps."""
    if opt.kind == "enum":
        return opt.choices[-1]
    if opt.kind == "bool":
        return not opt.default if isinstance(opt.default, bool) else True
    if opt.kind in ("int", "float"):
        low = opt.server_low if opt.server_low is not None else 0
        high = opt.server_high if opt.server_high is not None else math.inf
        value = opt.default if isinstance(opt.default, (int, float)) else min(max(low, 8), high)
        return int(value) if opt.kind == "int" else float(value)
    return {"temperatures": 1.0, "weights": [0.5, 0.25], "induction_head_pairs": [[0, 1]],
            "induction_head_set": "all"}[opt.kind]


@pytest.mark.parametrize("name,row", ROWS, ids=[n for n, _ in ROWS])
def test_every_http_option_round_trips_through_the_allow_list(name, row):
    artifact_names = {"draft_model": "tiny", "ngram": "corpus", "heads": "mine", "rescorer": "small"}
    for option, opt in http_options(row).items():
        assert opt.kind in SERVER_KINDS, f"{name}.{option}: the server cannot check kind {opt.kind!r}"
        if opt.kind == "artifact":
            sent = artifact_names[opt.artifact]
            got = request_options(name, {option: sent}, CONFIG)
            assert got == {opt.http_target or option: CONFIG.artifacts[opt.artifact][sent]}
            with pytest.raises(ApiError, match="names"):
                request_options(name, {option: "/etc/passwd"}, CONFIG)     # never a path
            continue
        value = sample_value(opt)
        assert request_options(name, {option: value}, CONFIG) == {option: value}, (name, option)
        # The library checks the value, with the server's bounds and without (they agree on what a request sends).
        row.resolve_options({option: value, **_needed(name, option)}, CONFIG.bounds())
        row.resolve_options({option: value, **_needed(name, option)})


def _needed(name, option=None):
    """What a request sends beside `option` for it to apply: the server attaches suffix's store; pld_plus's
    induction_heads rank with rank_by='attention' only."""
    from multidraft.suffix.store import SuffixStore
    if name == "suffix":
        return {"store": SuffixStore()}
    return {"rank_by": "attention"} if (name, option) == ("pld_plus", "induction_heads") else {}


@pytest.mark.parametrize("name,row", ROWS, ids=[n for n, _ in ROWS])
def test_library_only_options_are_refused_over_http_with_a_reason(name, row):
    for option, opt in row.specs.items():
        if opt.http and not opt.outputs:
            continue
        with pytest.raises(ApiError) as info:
            request_options(name, {option: opt.default}, CONFIG)
        assert info.value.status == 400 and option in str(info.value)
        if not opt.outputs:
            assert opt.why_not_http, f"{name}.{option} is library-only: say what a request does instead"


def test_http_bounds_and_caps_come_from_the_rows():
    """One check, the library's (issue #45): a server's bounds tighten it and its message says where they come from."""
    pld, beam, superposed = METHODS["pld"], METHODS["beam"], METHODS["superposed"]
    assert pld.resolve_options({"max_ngram": 65})["max_ngram"] == 65              # the library's own bound is looser
    with pytest.raises(InvalidOptionError, match=r"max_ngram must be an integer in 1\.\.64 \(this server's limit\)"):
        pld.resolve_options({"max_ngram": 65}, CONFIG.bounds())
    capped = ServerConfig(max_beams=3).validate()
    with pytest.raises(ServerLimitError, match=r"in 1\.\.3 \(this server's limit: serve --max-beams\)") as info:
        beam.resolve_options({"num_beams": 4}, capped.bounds())
    assert info.value.param == "num_beams"
    with pytest.raises(InvalidOptionError, match="num_beams must be an integer in 1..3") as info:
        beam.resolve_options({"num_beams": 0}, capped.bounds())         # under the library's bound: no cap passed
    assert not isinstance(info.value, ServerLimitError)
    many = [0.5] * 17
    assert superposed.resolve_options({"ngram_weights": many})["ngram_weights"] == many
    with pytest.raises(InvalidOptionError, match="ngram_weights must hold at most 16 entries"):
        superposed.resolve_options({"ngram_weights": many}, CONFIG.bounds())
    with pytest.raises(ApiError, match="'n', not 'num_drafts'"):
        request_options("superposed", {"num_drafts": 2}, CONFIG)


def test_a_servers_cap_lowers_the_defaults_above_it():
    """`serve --max-draft-tokens 16` bounds every request's drafts, also one that takes suffix's default (64)."""
    suffix, pld_plus = METHODS["suffix"], METHODS["pld_plus"]
    capped = ServerConfig(max_draft_tokens=16).validate().bounds()
    assert suffix.options["max_draft_tokens"] > 16
    assert suffix.resolve_options({}, capped)["max_draft_tokens"] == 16
    library = suffix.resolve_options({})                    # no server: the library's own default
    assert library["max_draft_tokens"] == suffix.options["max_draft_tokens"]
    assert suffix.resolve_options({"max_draft_tokens": 8}, capped)["max_draft_tokens"] == 8
    with pytest.raises(ServerLimitError, match="serve --max-draft-tokens"):
        suffix.resolve_options({"max_draft_tokens": 17}, capped)
    tight = ServerConfig(max_draft_tokens=2).validate().bounds()
    options = pld_plus.resolve_options({}, tight)           # 16 and 4 lowered to 2, still a valid pair
    assert options["num_draft_tokens"] == options["short_draft_tokens"] == 2


def test_suffix_row_checks_its_options_before_anything_runs():
    suffix = METHODS["suffix"]
    for bad, fragment in [({"alpha": 0}, "alpha"), ({"max_draft_tokens": 0}, "max_draft_tokens"),
                          ({"min_token_prob": 2}, "min_token_prob"), ({"use_context": "yes"}, "use_context"),
                          ({"store": "somewhere"}, "store"), ({"alpha": math.inf}, "alpha")]:
        with pytest.raises(InvalidOptionError, match=fragment):
            suffix.resolve_options(bad)


def test_cli_values_are_typed_by_the_spec():
    assert parse_cli_option("pld", "num_draft_tokens", "8") == 8
    assert parse_cli_option("suffix", "alpha", "2") == 2.0 and isinstance(parse_cli_option("suffix", "alpha", "2"), float)
    assert parse_cli_option("speculative", "adaptive", "true") is True
    assert parse_cli_option("pld", "variant", "reference") == "reference"
    assert parse_cli_option("blockwise", "num_heads", "none") is None
    assert parse_cli_option("superposed", "ngram_weights", "[0.5, 0.5]") == [0.5, 0.5]
    assert parse_cli_option("pld", "num_draft_tokens", "abc") == "abc"        # refused by the row's check
    assert parse_cli_value("x", "3", None) == 3                                # unknown option: JSON as before
    for name, row in ROWS:
        for option, opt in row.specs.items():
            if opt.kind in ("int", "float", "bool") and opt.default is not None:
                assert parse_cli_option(name, option, str(opt.default)) == opt.default, (name, option)


def test_methods_listing_names_every_option(capsys):
    from multidraft.generate_cli import run_methods
    assert run_methods(None) == 0
    listing = capsys.readouterr().out
    for name, row in ROWS:
        assert name in listing
        for option in row.specs:
            assert f"-o {option}=" in listing


def test_every_option_has_a_spec_and_rows_check_their_defaults():
    for name, row in ROWS:
        assert all(isinstance(opt, Opt) for opt in row.specs.values())
        row.resolve_options(_needed(name))             # the defaults pass the row's own checks


def test_every_cap_an_option_names_is_one_the_server_hands_over():
    """ServerBounds.limit(name) is None for a cap the server does not pass: an option naming a ServerConfig field
    missing from config.CAPS would go uncapped over HTTP, silently."""
    from multidraft.server.config import CAPS
    named = {opt.cap for row in METHODS.values() for opt in row.specs.values() if opt.cap is not None}
    assert named and named <= set(CAPS), sorted(named - set(CAPS))
    assert all(isinstance(getattr(ServerConfig(), cap), int) for cap in CAPS)
