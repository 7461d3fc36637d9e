"""Write the toy vocabulary-only GGUFs of tests/data/llama.cpp/vocab and their test vectors.

`python tests/data/llama.cpp/make_toy_vocabs.py` writes, deterministically:
- `ggml-vocab-toy-spm.gguf`: a SentencePiece vocabulary (`tokenizer.ggml.model` "llama"): the
  256 byte pieces, a control and a user-defined token, and pieces learnt by greedy pair merging
  over a small corpus, each scored minus its merge step;
- `ggml-vocab-toy-bpe.gguf`: a byte-level BPE (`gpt2`, pre-tokenizer `llama-bpe`) learnt the same
  way over GPT-2's byte alphabet, with its merges;
- each with `.inp` (texts, each followed by the line `__ggml_vocab_test__`, as llama.cpp writes
  them) and `.out` (one line of token ids per text) computed by the reference algorithms below,
  llama.cpp's: SentencePiece merges the adjacent pair whose union has the highest score
  (leftmost first), then spells a symbol outside the vocabulary by its byte pieces; BPE splits
  the text by the pre-tokenizer's regex (ASCII texts only here: `re` has no `\\p{L}`), takes a
  piece found whole in the vocabulary as it is (Llama 3's `ignore_merges`), else merges the
  pair of lowest rank.
Special tokens' text is cut out first; SentencePiece prefixes a space to each text fragment.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import gguf

HERE = Path(__file__).resolve().parent / "vocab"
SEPARATOR = "\n__ggml_vocab_test__\n"
CORPUS = (
    "the cat sat on the mat. hello world, hello there! the other one is in the inn; "
    'it\'s 42 or 1337 items: {"name": "value", "n": 12} and then\n\nthat\'s all'
)
TEXTS = [
    "hello world",
    "the cat sat on the mat",
    " the  other\n\none",
    "",
    " ",
    "   ",
    "\n",
    "it's 2024!",
    '{"name": "value", "n": 12345}',
    "Grüße 日本 ☃",
    "hello<|ctl|>world",
    "<tool_call>the",
    "zzz\tq",
]
CONTROL, USER = "<|ctl|>", "<tool_call>"
SPACE = "\u2581"


def learn(words: list[list[str]], steps: int) -> list[tuple[str, str]]:
    """Greedy pair merging: at each step the most frequent adjacent pair (ties: first seen)."""
    merges = []
    for _ in range(steps):
        pairs = Counter(p for word in words for p in zip(word, word[1:], strict=False))
        if not pairs:
            break
        best = max(pairs.items(), key=lambda item: item[1])[0]
        merges.append(best)
        for word in words:
            i = 0
            while i < len(word) - 1:
                if (word[i], word[i + 1]) == best:
                    word[i : i + 2] = [word[i] + word[i + 1]]
                i += 1
    return merges


def split_specials(text: str) -> list[str]:
    return [part for part in re.split(f"({re.escape(CONTROL)}|{re.escape(USER)})", text) if part]


# ----------------------------------------------------------------------------------------------
# SentencePiece


def spm_vocabulary():
    pieces = ["<unk>", "<s>", "</s>", CONTROL, USER] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3, 3, 4] + [6] * 256
    scores = [0.0] * len(pieces)
    text = SPACE + CORPUS.replace(" ", SPACE)
    for ch in dict.fromkeys(text):
        pieces.append(ch)
        types.append(1)
        scores.append(-1000.0)
    for step, (left, right) in enumerate(learn([list(text)], 60)):
        if left + right not in pieces:
            pieces.append(left + right)
            types.append(1)
            scores.append(-float(step))
    return pieces, types, scores


class SentencePiece:
    """llama.cpp's SentencePiece tokenizer over `pieces` and their `scores`."""

    def __init__(self, pieces: list[str], scores: list[float]):
        self.ids = {piece: i for i, piece in enumerate(pieces)}
        self.scores = scores

    def encode(self, text: str) -> list[int]:
        ids, scores, out = self.ids, self.scores, []
        for part in split_specials(text):
            if part in (CONTROL, USER):
                out.append(ids[part])
                continue
            symbols = list((" " + part).replace(" ", SPACE))
            while True:
                best = None
                for i in range(len(symbols) - 1):
                    joined = ids.get(symbols[i] + symbols[i + 1])
                    if joined is not None and (best is None or scores[joined] > best[0]):
                        best = (scores[joined], i)
                if best is None:
                    break
                i = best[1]
                symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
            for symbol in symbols:
                if symbol in ids:
                    out.append(ids[symbol])
                else:
                    out += [ids[f"<0x{b:02X}>"] for b in symbol.encode("utf-8")]
        return out


# ----------------------------------------------------------------------------------------------
# Byte-level BPE


def byte_chars() -> dict[int, str]:
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars, shifted = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + shifted)
            shifted += 1
    return chars


# Llama 3's pre-tokenizer regex, for ASCII text (\p{L} -> [A-Za-z], \p{N} -> [0-9]).
LLAMA3_ASCII = re.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{1,3}"
    r"| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def to_chars(text: str) -> str:
    table = byte_chars()
    return "".join(table[b] for b in text.encode("utf-8"))


def bpe_vocabulary():
    words = [list(to_chars(w)) for w in LLAMA3_ASCII.findall(CORPUS)]
    merges = learn(words, 80)
    tokens = [byte_chars()[b] for b in range(256)]
    for left, right in merges:
        if left + right not in tokens:
            tokens.append(left + right)
    types = [1] * len(tokens) + [3, 4]
    tokens += [CONTROL, USER]
    return tokens, types, merges


class BytePairEncoding:
    """llama.cpp's BPE with Llama 3's pre-tokenizer (for ASCII text) and `ignore_merges`."""

    def __init__(self, tokens: list[str], merges: list[tuple[str, str]]):
        self.ids = {token: i for i, token in enumerate(tokens)}
        self.rank = {merge: i for i, merge in enumerate(merges)}

    def encode(self, text: str) -> list[int]:
        if not text.isascii():
            raise ValueError("the reference pre-tokenizer reads ASCII only")
        ids, rank, out = self.ids, self.rank, []
        for part in split_specials(text):
            if part in (CONTROL, USER):
                out.append(ids[part])
                continue
            for word in LLAMA3_ASCII.findall(part):
                symbols = list(to_chars(word))
                if "".join(symbols) in ids:  # ignore_merges
                    out.append(ids["".join(symbols)])
                    continue
                while True:
                    pairs = [
                        (rank[pair], i)
                        for i, pair in enumerate(zip(symbols, symbols[1:], strict=False))
                        if pair in rank
                    ]
                    if not pairs:
                        break
                    _, i = min(pairs)
                    symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]
                out += [ids[s] for s in symbols]
        return out


def write(name: str, model: str, tokens, types, extra) -> None:
    writer = gguf.GGUFWriter(str(HERE / f"ggml-vocab-{name}.gguf"), "llama")
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    extra(writer)
    writer.add_eos_token_id(2 if model == "llama" else len(tokens) - 2)
    writer.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def vectors(name: str, texts: list[str], encode) -> None:
    (HERE / f"ggml-vocab-{name}.gguf.inp").write_text(
        "".join(text + SEPARATOR for text in texts), encoding="utf-8", newline=""
    )
    (HERE / f"ggml-vocab-{name}.gguf.out").write_text(
        "".join("".join(f" {t}" for t in encode(text)) + "\n" for text in texts)
    )


def main() -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    pieces, types, scores = spm_vocabulary()

    def spm_extra(writer):
        writer.add_token_scores(scores)
        writer.add_tokenizer_pre("default")
        writer.add_unk_token_id(0)
        writer.add_bos_token_id(1)

    write("toy-spm", "llama", pieces, types, spm_extra)
    vectors("toy-spm", TEXTS, SentencePiece(pieces, scores).encode)

    tokens, types, merges = bpe_vocabulary()

    def bpe_extra(writer):
        writer.add_token_merges([f"{left} {right}" for left, right in merges])
        writer.add_tokenizer_pre("llama-bpe")

    write("toy-bpe", "gpt2", tokens, types, bpe_extra)
    ascii_texts = [text for text in TEXTS if text.isascii()]
    vectors("toy-bpe", ascii_texts, BytePairEncoding(tokens, merges).encode)


if __name__ == "__main__":
    main()
