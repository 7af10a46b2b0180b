"""`multidraft bench --ray local`: the same rows as a local run, from Ray actors that each hold a model copy."""

import pytest

from multidraft.eval.bench import read_results, run_bench
from tests.test_bench import make_config, make_prompts, tiny_folder  # noqa: F401  (fixture)


@pytest.mark.slow
def test_ray_local_matches_local_tokens(tiny_folder, tmp_path):  # noqa: F811
    config = make_config(tiny_folder, methods=["greedy", "pld"], tasks=["code_edit"])
    local, distributed = tmp_path / "local", tmp_path / "ray"
    run_bench(config, local, prompts=make_prompts(), progress=False)
    run_bench(config, distributed, prompts=make_prompts(), progress=False, ray_address="local", workers=2)
    header, rows = read_results(distributed)
    _, expected = read_results(local)
    assert header["runs"][-1]["mode"] == "ray:local"
    key = lambda r: (r["task"], r["prompt_id"], r["method"])  # noqa: E731
    assert sorted(map(key, rows)) == sorted(map(key, expected))
    tokens = {key(r): [t["token_ids"] for t in r["turns"]] for r in expected}
    for row in rows:
        assert row["error"] is None and row["equal_greedy"] is True
        assert [t["token_ids"] for t in row["turns"]] == tokens[key(row)]
    assert (distributed / "report.md").exists()
