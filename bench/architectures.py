"""corral against transformers on the tiny models of tests/model/test_architectures.py (Llama 3,
Llama with linear RoPE and biases, Qwen2, Qwen3, Mistral, Ministral, two Gemma 3 text), each
saved in float32 and in bfloat16, under both prompt attention paths: the largest logit error
(prompts of 1-40 tokens in a ragged batch, every position, a prompt in two pieces, 20 greedy
decode steps) and whether the greedy tokens are transformers' greedy choices. Printed as a
Markdown table (docs/models.md); the test asserts the same runs within 1e-3.

    .venv/bin/python bench/architectures.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "model"))
import conftest  # noqa: E402 - the tiny tokenizer's files
import test_architectures as cases  # noqa: E402 - leaves the root off sys.path, imports torch


def main() -> None:
    root, rows = Path(tempfile.mkdtemp()), []  # compare() takes the reference plan
    torch, transformers = cases.torch, cases.transformers
    for seed, (name, (config_class, fields)) in enumerate(cases.ARCHITECTURES.items()):
        config = getattr(transformers, config_class)(**cases.COMMON, **fields)
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", dtype=torch.float32
        )
        cases.randomize_(model, "gemma" in name, seed)
        for dtype in ("float32", "bfloat16"):
            folder = conftest.write_tiny_folder(root / f"{name}-{dtype}")
            model.to(getattr(torch, dtype)).save_pretrained(folder)
            for positional in (True, False):
                result = cases.compare(name, dtype, folder, positional)
                rows.append((name, dtype, positional, result["error"]))
    print("| architecture | weights | prompt attention | max logit error | greedy tokens |")
    print("|---|---|---|---|---|")
    for name, dtype, positional, error in rows:
        path = "ragged kernel in pieces" if positional else "attend_prompt GEMMs"
        print(f"| {name} | {dtype} | {path} | {error:.1e} | identical |")


if __name__ == "__main__":
    main()
