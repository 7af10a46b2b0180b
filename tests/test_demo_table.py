"""`make demo`'s closing table: pooled tok/s, ratios to both HF peers, acceptance length, equality; a failed
method's reason; exit 0 when only a peer failed."""

import json

from multidraft.eval.demo_table import demo_table, main


def row(method, tokens, seconds, peer=False, mal=None, equal=True, prompt="p0", error=None):
    return {"kind": "row", "task": "code_edit", "prompt_id": prompt, "method": method, "peer": peer,
            "tokens": tokens, "seconds": seconds, "error": error, "equal_greedy": equal, "runner": "fast",
            "stats": None if mal is None else {"mean_acceptance_length": mal}}


def test_pooled_rates_and_ratios():
    rows = [row("hf_greedy", 10, 10.0, peer=True), row("hf_greedy", 30, 10.0, peer=True, prompt="p1"),
            row("hf_prompt_lookup", 40, 10.0, peer=True), row("pld", 40, 5.0, mal=3.0),
            row("pld", 40, 5.0, mal=5.0, prompt="p1", equal=False), row("greedy", 1, 1.0, error="boom")]
    lines = demo_table(rows).splitlines()
    by_method = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines[2:] if line.startswith("| ")}
    assert by_method["hf_greedy"] == ["2.00", "1.00x", "0.50x", "—", "yes"]      # 40 tokens / 20 s pooled
    assert by_method["pld"] == ["8.00", "4.00x", "2.00x", "4.00", "NO"]
    assert by_method["greedy"] == ["failed: boom", "", "", "", ""]                 # a method that only failed says why
    assert "2 prompts" in lines[-1] and "'fast' runner" in lines[-1]


def test_exit_status_follows_our_rows_not_the_peers(tmp_path, capsys):
    peer_failed = [row("hf_greedy", 10, 1.0, peer=True), row("pld", 10, 0.5),
                   row("llama_cpp_greedy", 0, 0.0, peer=True, error="llama.cpp crashed (SIGSEGV) in its first decode")]
    for rows, code in ((peer_failed, 0), (peer_failed + [row("greedy", 0, 0.0, error="boom")], 1)):
        folder = tmp_path / str(code)
        folder.mkdir()
        (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [{"kind": "header"}] + rows))
        assert main([str(folder)]) == code
        out = capsys.readouterr().out
        assert "| llama_cpp_greedy | failed: llama.cpp crashed (SIGSEGV) in its first decode |" in out
