"""`make demo`: greedy vs prompt lookup on the default model, on a real code-editing prompt.

The prompt is a function from the CPython standard library plus an edit instruction, the kind of task where
the answer copies most of its input, so prompt lookup drafts are often right.
"""

from __future__ import annotations

import argparse
import inspect
import textwrap

import multidraft


def code_edit_prompt() -> list[dict]:
    source = inspect.getsource(textwrap.dedent)
    return [{"role": "user", "content": "Add type hints to this Python function. Reply with the full function "
                                        "only, in one ```python block.\n\n```python\n" + source + "```"}]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    args = parser.parse_args(argv)

    lm = multidraft.load_model(args.model)
    messages = code_edit_prompt()
    print(f"model: {lm.name} ({lm.dtype}, {lm.device}); prompt: textwrap.dedent + 'add type hints', "
          f"{len(lm.encode(messages))} tokens")
    multidraft.generate(lm, "def f(x):", max_new_tokens=2)          # warm-up
    results = {}
    for method in ("greedy", "pld"):
        results[method] = multidraft.generate(lm, messages, method=method, max_new_tokens=args.max_new_tokens)
        print(f"  {results[method].stats.summary()}")
    greedy, pld = results["greedy"], results["pld"]
    speedup = greedy.stats.total_time / pld.stats.total_time
    print("\n| method | tokens | tok/s | speedup | mean acceptance length |\n|---|---|---|---|---|")
    for name, result in results.items():
        s = result.stats
        print(f"| {name} | {s.generated_tokens} | {s.tokens_per_second:.2f} | "
              f"{greedy.stats.total_time / s.total_time:.2f}x | {s.mean_acceptance_length:.2f} |")
    identical = greedy.token_ids == pld.token_ids
    print(f"\nPLD speedup over greedy: {speedup:.2f}x; outputs identical: {identical}")
    print("\n--- output ---\n" + pld.text)
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
