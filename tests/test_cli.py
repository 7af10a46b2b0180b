"""`multidraft generate` end to end on a tiny model saved as a local HF folder."""

import io
import json
import sys

from multidraft.cli import main


def test_generate_json_pld_equals_greedy(tiny_folder, capsys):
    prompt = "the cat sat on the mat and the cat sat on the"
    assert main(["generate", "--model", tiny_folder, "--json", "--max-new-tokens", "12", prompt]) == 0
    greedy = json.loads(capsys.readouterr().out)
    assert main(["generate", "--model", tiny_folder, "--method", "pld", "-o", "num_draft_tokens=4", "--json",
                 "--max-new-tokens", "12", prompt]) == 0
    pld = json.loads(capsys.readouterr().out)
    assert pld["token_ids"] == greedy["token_ids"] and len(pld["token_ids"]) > 0
    assert pld["stats"]["method"] == "pld" and pld["stats"]["generated_tokens"] == len(pld["token_ids"])


def test_generate_reads_stdin_and_prints_stats(tiny_folder, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("the cat sat"))
    assert main(["generate", "--model", tiny_folder, "--stats", "--max-new-tokens", "5"]) == 0
    captured = capsys.readouterr()
    assert "mean acceptance length" in captured.err


def test_generate_user_errors_exit_2(tiny_folder, capsys):
    assert main(["generate", "--model", tiny_folder, "--max-new-tokens", "0", "the cat"]) == 2
    assert "max_new_tokens" in capsys.readouterr().err
    assert main(["generate", "--model", tiny_folder, "--temperature", "-1", "the cat"]) == 2
    assert "temperature" in capsys.readouterr().err
    assert main(["generate", "--model", tiny_folder, "--chat", "the cat"]) == 2
    assert "chat template" in capsys.readouterr().err


def test_generate_prints_every_draft_of_a_multi_draft_method(tiny_folder, capsys):
    assert main(["generate", "--model", tiny_folder, "--method", "beam", "-o", "num_beams=3",
                 "--max-new-tokens", "4", "the cat sat"]) == 0
    out = capsys.readouterr().out
    assert "--- draft 1" in out and "--- draft 2" in out
    assert main(["generate", "--model", tiny_folder, "--method", "beam", "-o", "num_beams=3", "--json",
                 "--max-new-tokens", "4", "the cat sat"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["drafts"]) >= 2 and data["drafts"][0]["token_ids"] == data["token_ids"]


def test_generate_stream_prints_the_final_text(tiny_folder, capsys):
    """--stream prints exactly the final text (the server's detokenizer): with a stop string, nothing of it."""
    prompt = "the cat sat on the mat and the cat sat on the"
    common = ["generate", "--model", tiny_folder, "--max-new-tokens", "16"]
    assert main(common + ["--json", prompt]) == 0
    full = json.loads(capsys.readouterr().out)["text"]
    assert main(common + ["--stream", prompt]) == 0
    assert capsys.readouterr().out == full + "\n"
    words = full.split()
    assert len(words) >= 3, full
    stop = words[len(words) // 2]
    assert main(common + ["--json", "--stop", stop, prompt]) == 0
    cut = json.loads(capsys.readouterr().out)["text"]
    assert stop not in cut and len(cut) < len(full)
    assert main(common + ["--stream", "--stop", stop, prompt]) == 0
    assert capsys.readouterr().out == cut + "\n"


def test_the_command_line_loads_the_web_framework_only_to_serve():
    """`multidraft bench`, `generate` and the others import no FastAPI (~0.25 s each start; and a machine without
    the server's packages, such as a GPU image, runs them): the server's app is imported when a server is made."""
    import subprocess

    code = ("import sys, multidraft.cli; assert 'fastapi' not in sys.modules, 'multidraft.cli imported fastapi'; "
            "from multidraft.server import create_app; assert 'fastapi' in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
