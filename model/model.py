"""`Model`: a loaded Llama's weights, tokenizer and chat template together, and the batched
prefill/decode API over a KV cache that the generation engine drives (docs/design.md section 6).

The engine's loop, in shapes:

    model = load_model()                          # the default SmolLM2-135M-Instruct
    cache = model.new_cache(n_slots=32, max_len=2048)
    logits = model.prefill(cache, slot, ids)      # float32 [V]: next-token logits of slot
    logits = model.prefill_batch(cache, slots, [ids, ...])   # float32 [B, V], shared GEMMs
    logits = model.decode(cache, slots, tokens)   # int [B], int [B] -> float32 [B, V]
    cache.reset(slot)                             # the slot is free for the next request

Each slot holds one sequence; `cache.lengths[slot]` is how many of its tokens are cached.
`prefill` appends any number of tokens to a slot in one pass (a prompt, or tokens forced by a
grammar); `decode` appends one token to each of B distinct slots, each at its own position.
The arithmetic is `corral.model.llama`'s; loading a model from files is `corral.model.loading`'s.
"""

from __future__ import annotations

import copy
import dataclasses
from functools import cached_property
from pathlib import Path

import numpy as np
from corral.kernels import Vocabulary
from corral.kernels.compute.plan import ComputePlan
from corral.model import llama
from corral.model.chat import render_chat
from corral.model.errors import CacheError, ChatTemplateError
from corral.model.kv_cache import KVCache
from corral.model.vocabulary import vocabulary_from_tokenizer

DECODE_ROWS_MAX = 8
"""A prefill pass whose sequences are all at most this many tokens runs as decode rows
(`Model._decode_rows`): a decode step whose rows carry jump-forward's forced tokens keeps
decode's fused steps (docs/engine.md, "Jump-forward")."""


class Model:
    """A loaded Llama model: weights, tokenizer, chat template and the forward pass.

    Attributes:
        config: the `LlamaConfig`.
        tokenizer: `Tokenizer` (`encode(text) -> list[int]`, `decode(ids) -> str`).
        chat_template: the jinja2 chat template text, or None.
        special_tokens: template variables such as `bos_token`, `eos_token` (strings).
        eos_ids: tuple of token ids that end generation (config.json's and the tokenizer's EOS).
        vocabulary: the token bytes and EOS ids of the mask kernels (`corral.kernels.Vocabulary`).
        vocab_size: V, the width of the logits (config.json's vocab_size).
        params: the weights, as `llama.build_params` lays them out, and "plan": `plan`.
        plan: the `ComputePlan` the forward pass follows (its products, attention and KV
            cache dtype), chosen by `load_model`; `with_plan` gives the model on another.
        weights: "quantized" when decode reads the GGUF's quantization blocks (passes of at
            most `quant.QUANTIZED_MAX_ROWS` tokens), else "float32".
        path: the Hugging Face folder the model was loaded from.
        prefill_chunk: prompts longer than this are prefilled in chunks of this many tokens,
            to bound the attention scores' memory (Hq x chunk x length floats).
        kv_dtype: the plan's KV cache dtype as a NumPy type (np.float32 or np.float16).

    Args:
        plan: None for `ComputePlan.detect` (the host's default for these weights).
    """

    prefill_chunk = 1024

    def __init__(self, config, params, tokenizer, chat_template, special_tokens, path, plan=None):
        self.config = config
        if plan is None:
            plan = ComputePlan.detect(quantized="lm_head_blocks" in params)
        self.plan = plan
        self.params = _bound(params, plan)
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.add_bos_token = False  # a raw prompt starts with BOS (a GGUF's metadata may say so)
        self.special_tokens = special_tokens
        self.path = Path(path)
        self.weights = "quantized" if "lm_head_blocks" in params else "float32"
        self.vocab_size = config.vocab_size
        eos = set(config.eos_token_ids)
        eos_token = special_tokens.get("eos_token")
        if eos_token is not None and tokenizer.token_id(eos_token) is not None:
            eos.add(tokenizer.token_id(eos_token))
        self.eos_ids = tuple(sorted(eos))
        self._cos = self._sin = np.zeros((1, 0, config.head_dim // 2), np.float32)

    @property
    def kv_dtype(self) -> type:
        """The dtype of the caches `new_cache` makes (the plan's `kv_dtype`): np.float32 or
        np.float16."""
        return np.dtype(self.plan.kv_dtype).type

    def with_plan(self, plan: ComputePlan) -> Model:
        """The same model (weights shared, not copied) computing as `plan` says.

        Raises:
            ValueError: `plan` cannot run on this host (`ComputePlan.missing`).
        """
        reason = plan.missing()
        if reason is not None:
            raise ValueError(f"{plan} cannot run here: {reason}")
        other = copy.copy(self)
        other.plan = plan
        other.params = _bound(self.params, plan)
        return other

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Model({self.path.name}: {c.num_hidden_layers} layers, d={c.hidden_size}, "
            f"{c.num_attention_heads}/{c.num_key_value_heads} heads, V={c.vocab_size})"
        )

    # ------------------------------------------------------------------------------------------
    # Text

    def raw_prompt(self, text: str) -> list[int]:
        """The token ids of `text` as a raw prompt (no chat template): BOS first where the model
        asks for it (`add_bos_token`), then the tokenizer's ids."""
        ids = self.tokenizer.encode(text)
        bos = self.config.bos_token_id
        return [bos, *ids] if self.add_bos_token and bos is not None else list(ids)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True, **extra) -> str:
        """Render a conversation with the model's chat template, as transformers'
        `apply_chat_template(..., tokenize=False)` does.

        Raises:
            ChatTemplateError: the model has no template, or the template refused the messages.
        """
        if self.chat_template is None:
            raise ChatTemplateError(
                f"{self.path}: the model has no chat template (a base model), so chat messages "
                "cannot be rendered into a prompt"
            )
        return render_chat(
            self.chat_template, messages, add_generation_prompt, self.special_tokens, **extra
        )

    @property
    def context_length(self) -> int:
        """The most tokens a sequence may hold, prompt and answer together: the context the model
        was trained for (config.json's `max_position_embeddings`; 8,192 for SmolLM2)."""
        return self.config.max_position_embeddings

    @cached_property
    def vocabulary(self) -> Vocabulary:
        """The vocabulary of the token-mask kernels (docs/design.md section 4), built once: the raw
        bytes of each of the V = `vocab_size` token ids (None for special and unused ids) and
        `eos_ids`. A `corral.kernels.Vocabulary`."""
        return vocabulary_from_tokenizer(self.tokenizer.backend, self.eos_ids, self.vocab_size)

    # ------------------------------------------------------------------------------------------
    # Forward passes

    def new_cache(self, n_slots: int, max_len: int) -> KVCache:
        """A KV cache of `n_slots` empty slots of `max_len` tokens each, of `kv_dtype` (see
        `KVCache`)."""
        return KVCache(self.config, n_slots, max_len, self.kv_dtype)

    def prefill(self, cache: KVCache, slot: int, ids) -> np.ndarray:
        """Append `ids` to slot `slot` in one pass; return the next-token logits.

        Args:
            cache: the KV cache; `cache.lengths[slot]` grows by len(ids).
            slot: which sequence (0 <= slot < cache.n_slots). Its cached tokens, if any, are
                the prefix of `ids` (call `cache.reset(slot)` first for a new sequence).
            ids: int token ids [n], n >= 1.

        Returns:
            float32 [V]: logits after the last of `ids`.

        Raises:
            CacheError: bad slot, empty ids, or the slot would exceed `cache.max_len`.
        """
        return self.prefill_batch(cache, [slot], [ids])[0]

    def prefill_batch(
        self, cache: KVCache, slots, sequences, allowed=None, last=None
    ) -> np.ndarray:
        """Append sequences[i] to slot slots[i] for several sequences at once; return the
        next-token logits of each (with `last`, also the logits at earlier positions).

        Short sequences share passes (one GEMM over their tokens together, up to
        `prefill_chunk` tokens a pass), so many short prompts read the weights once rather
        than once each; a sequence longer than `prefill_chunk` runs alone, chunk by chunk.

        Args:
            cache: the KV cache; `cache.lengths[slots[i]]` grows by len(sequences[i]).
            slots: int [B], distinct slot indices.
            sequences: B sequences of int token ids, each [n_i], n_i >= 1.
            allowed: None, or B entries, each None or the int token ids whose logits alone
                row i needs (the masked LM head, `llama.lm_head`: the others are -inf).
            last: None, or B ints, k_i within 1..len(sequences[i]): sequence i's logits after
                each of its last k_i tokens (jump-forward's forced tokens take their logprobs
                from the pass that writes them). The logits after the last token are
                computed as without `last` (the same rows through the same head, bit for
                bit); the earlier ones whole, in a head call of their own.

        Returns:
            float32 [B, V]: row i is the logits after the last token of sequences[i]. With
            `last`: float32 [sum k_i, V], sequence i's k_i rows together, in order (their last
            is the logits after its last token), the sequences one after the other.

        Raises:
            CacheError: repeated or missing slots, an empty sequence, a token id outside the
                vocabulary, or a slot that would exceed `cache.max_len`. Nothing is changed.
            ValueError: `last` has not one entry a sequence, or one outside 1..len(sequence).
        """
        if last is not None:
            lengths = [len(ids) for ids in sequences]
            if len(last) != len(lengths) or any(
                not 1 <= k <= n for k, n in zip(last, lengths, strict=True)
            ):
                raise ValueError(f"last needs one entry a sequence within 1..its length: {last}")
            if all(k == 1 for k in last):
                last = None
        hidden, _, earlier = self._prefill(cache, slots, sequences, False, last)
        logits = llama.lm_head(self.params, hidden, allowed)
        if last is None:
            return logits
        ends = np.cumsum(last) - 1  # row of each sequence's last logits
        out = np.empty((int(ends[-1]) + 1, logits.shape[1]), np.float32)
        out[ends] = logits
        out[np.setdiff1d(np.arange(len(out)), ends)] = llama.lm_head(self.params, earlier)
        return out

    def decode(self, cache: KVCache, slots, tokens, allowed=None) -> np.ndarray:
        """Append one token to each of B slots, each at its own position; return their logits.

        Args:
            cache: the KV cache; `cache.lengths[slots]` grow by one.
            slots: int [B], distinct slot indices, in any order (each slot's keys are read
                in place, up to its own length).
            tokens: int [B], token b is appended to slot slots[b].
            allowed: None, or B entries, each None or the int token ids whose logits alone
                row b needs (the masked LM head, `llama.lm_head`: the others are -inf).

        Returns:
            float32 [B, V]: row b is slot slots[b]'s next-token logits.

        Raises:
            CacheError: repeated or missing slots, mismatched lengths, a token id outside the
                vocabulary, or a full slot.
        """
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if len(slots) != len(tokens) or len(slots) == 0:
            raise CacheError(
                f"decode needs as many slots as tokens (>= 1): {len(slots)}, {len(tokens)}"
            )
        if slots.min() < 0 or slots.max() >= cache.n_slots or len(np.unique(slots)) != len(slots):
            raise CacheError(f"slots must be distinct and within 0..{cache.n_slots - 1}: {slots}")
        self._check_tokens(tokens)
        positions = cache.lengths[slots]
        if positions.max() >= cache.max_len:
            raise CacheError(f"a slot is full (max_len {cache.max_len})")
        cos, sin = self._rope(int(positions.max()) + 1)
        hidden = llama.decode(
            self.params, self.config, cache.keys, cache.values, slots, positions, tokens, cos, sin
        )
        cache.lengths[slots] = positions + 1
        return llama.lm_head(self.params, hidden, allowed)

    def logits(self, ids) -> np.ndarray:
        """Logits at every position of one sequence (a convenience; uses a fresh cache).

        ids int [n], n >= 1 -> float32 [n, V]; row i predicts the token after ids[i].
        """
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        cache = self.new_cache(1, max(len(ids), 1))
        return self._prefill(cache, [0], [ids], all_positions=True)[1]

    def _prefill(self, cache: KVCache, slots, sequences, all_positions: bool, last=None):
        """Plan and run prefill passes. -> (last hidden state per sequence [B, d], logits of
        every position [N, V] when all_positions else None, the hidden states [sum(last) - B,
        d] of each sequence's last[i] - 1 positions before its last, sequence after sequence,
        when `last` is given else None)"""
        slots = [cache.check_slot(slot) for slot in slots]
        sequences = [np.asarray(ids, dtype=np.int64).reshape(-1) for ids in sequences]
        if len(slots) != len(sequences) or not slots or len(set(slots)) != len(slots):
            raise CacheError(f"prefill needs distinct slots, one per sequence: {slots}")
        for slot, ids in zip(slots, sequences, strict=True):
            if len(ids) == 0:
                raise CacheError("prefill needs at least one token")
            self._check_tokens(ids)
            if cache.lengths[slot] + len(ids) > cache.max_len:
                raise CacheError(
                    f"slot {slot} holds {cache.lengths[slot]} tokens; {len(ids)} more exceed "
                    f"max_len {cache.max_len}"
                )
        short = max(map(len, sequences)) <= DECODE_ROWS_MAX
        if short and not all_positions and sum(map(len, sequences)) <= self.prefill_chunk:
            return self._decode_rows(cache, slots, sequences, last)
        chunk = self.prefill_chunk
        passes, group, group_tokens = [], [], 0  # a pass: [(sequence index, slot, start, ids)]
        for i, (slot, ids) in enumerate(zip(slots, sequences, strict=True)):
            start = int(cache.lengths[slot])
            if group and group_tokens + min(len(ids), chunk) > chunk:
                passes.append(group)
                group, group_tokens = [], 0
            if len(ids) > chunk:
                passes += [
                    [(i, slot, start + b, ids[b : b + chunk])] for b in range(0, len(ids), chunk)
                ]
                continue
            group.append((i, slot, start, ids))
            group_tokens += len(ids)
        if group:
            passes.append(group)

        ends = [
            int(cache.lengths[slot]) + len(ids) for slot, ids in zip(slots, sequences, strict=True)
        ]
        cos, sin = self._rope(max(ends))
        final = np.empty((len(slots), self.config.hidden_size), np.float32)
        earlier = None
        if last is not None:  # sequence i's earlier rows start at offsets[i]
            offsets = np.concatenate([[0], np.cumsum(np.asarray(last) - 1)])
            earlier = np.empty((int(offsets[-1]), self.config.hidden_size), np.float32)
        outputs = []
        for group in passes:
            segments = [(slot, start, len(ids)) for _, slot, start, ids in group]
            tokens = np.concatenate([ids for *_, ids in group])
            hidden = llama.prefill(
                self.params, self.config, cache.keys, cache.values, segments, tokens, cos, sin
            )
            row = -1
            for i, slot, start, ids in group:
                row += len(ids)
                cache.lengths[slot] = start + len(ids)
                final[i] = hidden[row]
                if earlier is not None:  # positions first..ends[i]-2, those in this piece
                    first = max(ends[i] - last[i], start)
                    stop = min(ends[i] - 1, start + len(ids))
                    for position in range(first, stop):
                        at = offsets[i] + position - (ends[i] - last[i])
                        earlier[at] = hidden[row - (start + len(ids) - 1 - position)]
            if all_positions:
                outputs.append(llama.lm_head(self.params, hidden))
        logits = np.concatenate(outputs, axis=0) if all_positions else None
        return final, logits, earlier

    def _decode_rows(self, cache: KVCache, slots, sequences, last):
        """`_prefill` of short sequences as one decode pass (`llama.decode`) of one row per
        token, each at its own (slot, position): a row sees its slot's cache up to its own
        position, written before attention, so a sequence's rows attend causally, and
        decode's fused steps serve the whole pass (jump-forward's forced tokens riding on a
        decode step; `DECODE_ROWS_MAX`). The same float32 operations per row as the prefill
        pass (the same results bit for bit on SmolLM2's plans; the tests hold the two to
        float32 rounding). Same returns as `_prefill` (without
        all_positions); the slots and tokens were checked by the caller."""
        sizes = np.array([len(ids) for ids in sequences], np.int64)
        starts = cache.lengths[np.asarray(slots, np.int64)].astype(np.int64)
        rows = np.repeat(np.asarray(slots, np.int64), sizes)
        ends = np.cumsum(sizes) - 1  # each sequence's last row
        positions = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(
            starts - (ends + 1 - sizes), sizes
        )
        cos, sin = self._rope(int(positions.max()) + 1)
        tokens = np.concatenate(sequences)
        hidden = llama.decode(
            self.params, self.config, cache.keys, cache.values, rows, positions, tokens, cos, sin
        )
        cache.lengths[np.asarray(slots, np.int64)] = starts + sizes
        earlier = None
        if last is not None:  # sequence i's rows ends[i] - last[i] + 1 .. ends[i] - 1, in order
            pairs = zip(ends.tolist(), last, strict=True)
            picks = [np.arange(end - k + 1, end, dtype=np.int64) for end, k in pairs]
            earlier = hidden[np.concatenate(picks)]
        return hidden[ends], None, earlier

    def _check_tokens(self, tokens: np.ndarray) -> None:
        if tokens.min() < 0 or tokens.max() >= self.vocab_size:
            raise CacheError(f"token ids must be within 0..{self.vocab_size - 1}")

    def _rope(self, n_positions: int) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin [K, >= n_positions, hd/2] (`llama.rope_tables`), grown (doubling) on demand."""
        if self._cos.shape[1] < n_positions:
            size = max(n_positions, 2 * self._cos.shape[1], 1024)
            self._cos, self._sin = llama.rope_tables(self.config, size)
        return self._cos, self._sin


def _bound(params: dict, plan: ComputePlan) -> dict:
    """`params` with "plan" set to `plan`, and its quantization blocks (`quant.TiledMatrix`)
    computing as `plan` says (new dicts; the arrays are shared)."""

    def bind(matrix):
        return dataclasses.replace(matrix, plan=plan)

    out = {**params, "plan": plan}
    out["layers"] = [
        {**layer, "blocks": {n: bind(m) for n, m in layer["blocks"].items()}}
        if "blocks" in layer
        else layer
        for layer in params["layers"]
    ]
    if "lm_head_blocks" in params:
        out["lm_head_blocks"] = bind(params["lm_head_blocks"])
    return out
