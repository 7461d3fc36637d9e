"""The rules of docs/design.md section 4 on small hand-made grammars, and the `Constraint` matcher's
API (mask with a token budget, advance by tokens and by bytes)."""

from __future__ import annotations

import numpy as np
import pytest
from corral.automata import Dfa, regex_to_dfa
from corral.kernels import (
    EAGER_LIMIT_BYTES,
    Constraint,
    TokenIndex,
    TokenNotAllowedError,
    Vocabulary,
    choose_mode,
)
from corral.kernels.masks.index import unique_rows
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import SETTINGS, mask_ids, oracle_allowed, random_dfas, random_vocabularies

# ids:         0     1     2      3     4    5   6     7
TOKENS = [b"a", b"b", b"ab", None, b"", b"a", None, b"ba"]
EOS = 6


@pytest.fixture
def vocabulary():
    return Vocabulary.from_list(TOKENS, eos_ids=[EOS])


def test_eos_only_in_accepting_states(vocabulary):
    index = TokenIndex(regex_to_dfa("a(ba)*"), vocabulary)
    for state in range(index.n_states):
        assert (EOS in mask_ids(index.mask(state))) == index.is_accepting(state)


def test_specials_and_empty_tokens_never_allowed(vocabulary):
    index = TokenIndex(regex_to_dfa("[\\x00-\\xff]*".replace("\\xff", "\\x7f")), vocabulary)
    for state in range(index.n_states):
        allowed = mask_ids(index.mask(state))
        assert not allowed & {3, 4}
        assert index.next_state(state, 3) == -1 and index.next_state(state, 4) == -1


def test_duplicate_tokens_are_all_allowed(vocabulary):
    index = TokenIndex(regex_to_dfa("ab?"), vocabulary)
    assert mask_ids(index.mask(0)) == {0, 2, 5}
    assert index.next_state(0, 0) == index.next_state(0, 5) == 1


def test_advance_disallowed_token_raises(vocabulary):
    constraint = Constraint(TokenIndex(regex_to_dfa("ab"), vocabulary))
    with pytest.raises(TokenNotAllowedError):
        constraint.advance(1)  # "b" first
    with pytest.raises(TokenNotAllowedError):
        constraint.advance(EOS)  # not complete yet
    with pytest.raises(TokenNotAllowedError):
        constraint.advance(3)  # special
    with pytest.raises(TokenNotAllowedError):
        constraint.advance(4)  # empty
    with pytest.raises(TokenNotAllowedError):
        constraint.advance(99)  # outside the vocabulary
    assert constraint.state == 0 and not constraint.done


def test_advance_after_eos_raises(vocabulary):
    constraint = Constraint(TokenIndex(regex_to_dfa("a(ba)*"), vocabulary))
    constraint.advance(0)
    assert constraint.is_complete() and not constraint.done
    constraint.advance(EOS)
    assert constraint.done and constraint.is_complete()
    with pytest.raises(TokenNotAllowedError):
        constraint.advance(7)
    with pytest.raises(TokenNotAllowedError):
        constraint.mask()


def test_complete_grammar_with_nothing_left_ends(vocabulary):
    constraint = Constraint(TokenIndex(regex_to_dfa("ab"), vocabulary))
    constraint.advance(2)  # "ab": accepting, no byte may follow
    assert constraint.done and constraint.is_complete()
    with pytest.raises(TokenNotAllowedError):
        constraint.advance(EOS)


def test_complete_grammar_whose_continuations_no_token_spells_ends():
    # "ab|abc" after "ab": "c" could follow, but no token holds it.
    vocabulary = Vocabulary.from_list([b"a", b"b", None], eos_ids=[2])
    constraint = Constraint(TokenIndex(regex_to_dfa("ab|abc"), vocabulary))
    constraint.advance(0)
    constraint.advance(1)
    assert constraint.done


def test_copy_is_independent(vocabulary):
    constraint = Constraint(TokenIndex(regex_to_dfa("a(ba)*"), vocabulary))
    constraint.advance(0)
    other = constraint.copy()
    other.advance(1)
    assert constraint.state != other.state and constraint.index is other.index
    assert constraint.is_complete() and not other.is_complete()


def test_a_star_eos_competes_with_a_at_every_step():
    """Generation never stops at the first accepting state."""
    vocabulary = Vocabulary.from_list([b"a", b"aa", b"b", None], eos_ids=[3])
    constraint = Constraint(TokenIndex(regex_to_dfa("a*"), vocabulary))
    for _ in range(10):
        assert mask_ids(constraint.mask()) == {0, 1, 3}
        assert not constraint.done and constraint.is_complete()
        constraint.advance(0)
    constraint.advance(3)
    assert constraint.done


def test_token_budget_steers_to_acceptance():
    # '"' then at least 3 letters then '"'.
    vocabulary = Vocabulary.from_list([b'"', b"x", b"xxx", b'x"', b'"xxx"', None], eos_ids=[5])
    index = TokenIndex(regex_to_dfa('"x{3,}"'), vocabulary)
    assert index.max_token_distance == 2  # after '"': "xxx" then '"'
    constraint = Constraint(index)
    assert constraint.tokens_to_complete() == 1
    assert mask_ids(constraint.mask(tokens_left=1)) == {4}  # only the whole answer fits
    assert mask_ids(constraint.mask(tokens_left=2)) == {4}  # '"' would need 2 more tokens
    assert mask_ids(constraint.mask(tokens_left=3)) == {0, 4} == mask_ids(constraint.mask())
    with pytest.raises(ValueError):
        constraint.mask(tokens_left=0)
    constraint.advance(0)
    assert constraint.tokens_to_complete() == 2
    assert mask_ids(constraint.mask(tokens_left=2)) == {2}
    # Nothing fits in 1 token: the plain mask (the answer will be cut by the budget).
    assert mask_ids(constraint.mask(tokens_left=1)) == {1, 2} == mask_ids(constraint.mask())
    constraint.advance(2)
    assert constraint.tokens_to_complete() == 1
    assert mask_ids(constraint.mask()) == {0, 1, 2, 3}
    assert mask_ids(constraint.mask(tokens_left=1)) == {0, 3}
    assert mask_ids(constraint.mask(tokens_left=2)) == {0, 1, 2, 3}


def test_advance_bytes_walks_text_all_or_nothing():
    vocabulary = Vocabulary.from_list([b'"', b"x", b"xxx", b'x"', None], eos_ids=[4])
    constraint = Constraint(TokenIndex(regex_to_dfa('"x{3,}"'), vocabulary))
    constraint.advance_bytes(b'"xx')
    state = constraint.state
    with pytest.raises(TokenNotAllowedError):
        constraint.advance_bytes(b'x"x')  # the last byte is dead
    assert constraint.state == state and not constraint.done
    constraint.advance_bytes(b'x"')
    assert constraint.done and constraint.is_complete() and constraint.tokens_to_complete() == 0
    with pytest.raises(TokenNotAllowedError):
        constraint.advance_bytes(b"x")


def test_mode_size_rule():
    assert choose_mode(100, 49152) == "visit"
    n_words = (49152 + 31) // 32
    assert choose_mode(EAGER_LIMIT_BYTES // (4 * n_words), 49152) == "visit"
    assert choose_mode(EAGER_LIMIT_BYTES // (4 * n_words) + 1, 49152) == "lazy"
    dfa = Dfa(np.full((1, 256), 0, dtype=np.int32), np.ones(1, dtype=bool))
    assert TokenIndex(dfa, Vocabulary.from_list([b"a"]), mode="auto").mode == "eager"
    with pytest.raises(ValueError):
        TokenIndex(dfa, Vocabulary.from_list([b"a"]), mode="fast")


def test_unique_rows():
    rng = np.random.default_rng(0)
    for n_words in (1, 2, 3, 1536):
        rows = rng.integers(0, 2**32, (5, n_words), dtype=np.uint32)
        table = rows[rng.integers(0, 5, 40)]
        first, inverse = unique_rows(table)
        np.testing.assert_array_equal(table[first][inverse], table)
        assert len(first) == len({r.tobytes() for r in table})


@pytest.mark.parametrize("mode", ["eager", "visit", "lazy"])
def test_state_out_of_range_raises(mode, vocabulary):
    index = TokenIndex(regex_to_dfa("ab"), vocabulary, mode=mode)
    for state in (-1, index.n_states):
        with pytest.raises(IndexError):
            index.mask(state)


def test_threads_visiting_a_fresh_index_see_the_eager_masks(vocabulary):
    """Visit mode fills its rows as threads ask (a server's worker and its event loop): every
    thread gets the eager masks, and each distinct row is stored once."""
    from concurrent.futures import ThreadPoolExecutor

    dfa = regex_to_dfa('\\{"(a|b|ab)*":[0-9]{1,4}(,"c+":[ab]{2,5})?\\}')
    eager = TokenIndex(dfa, vocabulary, mode="eager")
    visit = TokenIndex(dfa, vocabulary, mode="visit")
    orders = [list(range(dfa.n_states))[::step] * 3 for step in (1, -1, 2, -2)]

    def read(order):
        return [(s, visit.mask(s).tobytes(), visit.can_continue(s)) for s in order]

    with ThreadPoolExecutor(4) as pool:
        for seen in pool.map(read, orders):
            for s, row, continues in seen:
                assert row == eager.mask(s).tobytes()
                assert continues == eager.can_continue(s)
    assert visit.n_unique_masks == eager.n_unique_masks


@SETTINGS
@given(
    dfa=random_dfas(),
    vocabulary=random_vocabularies(),
    walk=st.lists(st.integers(0, 200), min_size=1, max_size=40),
    limit=st.sampled_from([1, 3, 1 << 14]),
)
def test_advance_follows_the_oracle_through_the_memo(dfa, vocabulary, walk, limit):
    """`advance` (through `TokenIndex.after`'s memo, also when the memo is emptied every few
    steps) agrees with walking the token's bytes: the next state, done exactly when EOS was
    taken in an accepting state or the end state accepts and allows no text token, and a
    refusal (with the state and done left as they were) exactly when the oracle forbids the
    token; the same step taken twice agrees with itself."""
    import corral.kernels.masks.index as index_module

    index = TokenIndex(dfa, vocabulary)
    old_limit, index_module.AFTER_MEMO_LIMIT = index_module.AFTER_MEMO_LIMIT, limit
    try:
        for _ in range(2):  # the second walk reads the memo
            constraint = Constraint(index)
            for pick in walk:
                if constraint.done:
                    break
                state = constraint.state
                token = pick % (vocabulary.size + 2)  # some ids outside the vocabulary
                allowed = token < vocabulary.size and token in oracle_allowed(
                    dfa, vocabulary, state
                )
                if not allowed:
                    with pytest.raises(TokenNotAllowedError):
                        constraint.advance(token)
                    assert (constraint.state, constraint.done) == (state, False)
                    continue
                constraint.advance(token)
                if token in vocabulary.eos_ids:
                    assert (constraint.state, constraint.done) == (state, True)
                    continue
                end = dfa.step(state, vocabulary.tokens[token])
                text_next = oracle_allowed(dfa, vocabulary, end) - set(vocabulary.eos_ids)
                assert constraint.state == end
                assert constraint.done == bool(dfa.accept[end] and not text_next)
    finally:
        index_module.AFTER_MEMO_LIMIT = old_limit


def test_auto_is_eager_when_the_walks_enter_few_subtrees(monkeypatch):
    """`auto` weighs the subtrees each state's walk enters (`walk_work`), not `n_states *
    n_nodes`: a counter that allows one byte walks one small subtree per state over a trie of
    many nodes, and is built eagerly, with the masks of the visit mode."""
    from corral.kernels.masks import index as index_module

    tokens = [b"a", b"aa", b"aaa"] + [bytes([ord("x")]) + bytes([b]) * 3 for b in range(97, 123)]
    vocabulary = Vocabulary.from_list(tokens, eos_ids=[0])
    dfa = regex_to_dfa("a{1,30}")
    n_nodes = vocabulary.trie.n_nodes
    monkeypatch.setattr(index_module, "EAGER_WORK_LIMIT", dfa.n_states * n_nodes // 4)
    auto = TokenIndex(dfa, vocabulary)
    assert auto.mode == "eager"
    visit = TokenIndex(dfa, vocabulary, mode="visit")
    for state in range(dfa.n_states):
        np.testing.assert_array_equal(auto.mask(state), visit.mask(state))


@SETTINGS
@given(random_dfas(), random_vocabularies())
def test_walk_work_counts_the_subtrees_entered(dfa, vocabulary):
    """`walk_work` is, per state, the nodes under the root's children whose byte is live and
    which are neither looped on whole nor inside the state's run: counted here from each
    child's subtree of token bytes, never more than `n_states * n_nodes`."""
    from corral.kernels.masks.index import (
        DECODES_UTF8,
        UTF8_CATEGORIES,
        loop_categories,
        run_categories,
        walk_work,
    )
    from corral.kernels.masks.trie import BYTE_CATEGORY

    trie = vocabulary.trie
    trans = np.ascontiguousarray(dfa.trans, dtype=np.int32)
    loops = loop_categories(trans)
    own, run = run_categories(trans, loops, trie.max_depth)
    eos = set(vocabulary.eos_ids)
    texts = {t for i, t in enumerate(vocabulary.tokens) if t and i not in eos}  # the trie's
    expected = 0
    for s in range(dfa.n_states):
        wide = int(own[s]) | (int(UTF8_CATEGORIES) if own[s] & DECODES_UTF8 else 0)
        for first in sorted({t[0] for t in texts}):
            below = {t[:k] for t in texts if t[0] == first for k in range(1, len(t) + 1)}
            categories = 0
            for prefix in below:
                categories |= int(BYTE_CATEGORY[prefix[-1]])
            valid = all(_utf8_prefix(p) for p in below)
            inside = (
                own[s] != 0
                and categories & ~wide & 0xFFFF == 0
                and max(map(len, below)) <= run[s]
                and (valid or not own[s] & DECODES_UTF8)
            )
            if trans[s, first] >= 0 and categories & ~int(loops[s]) and not inside:
                expected += len(below)
    assert walk_work(trans, loops, own, run, trie) == expected <= dfa.n_states * trie.n_nodes


def _utf8_prefix(data: bytes) -> bool:
    """Whether `data` is valid UTF-8 or a valid UTF-8 text cut inside its last character."""
    for cut in range(4):
        try:
            (data + b"\x80" * cut).decode("utf-8") if cut else data.decode("utf-8")
            return True
        except UnicodeDecodeError:
            continue
    return False


@SETTINGS
@given(random_dfas(), random_vocabularies())
def test_visit_keeps_distinct_rows_when_their_hashes_collide(dfa, vocabulary):
    """Visit mode keeps each distinct row once, found by its hash and compared whole: with
    every hash made equal, each state still gets its own brute-force mask, and rows are
    shared only when equal."""
    from unittest import mock

    from corral.kernels.masks import index as index_module

    walk = index_module.visit_mask

    def colliding(*args):
        row, _ = walk(*args)
        return row, 0

    with mock.patch.object(index_module, "visit_mask", colliding):
        visit = TokenIndex(dfa, vocabulary, mode="visit")
        masks = [visit.mask(s) for s in range(dfa.n_states)]
    for state, mask in enumerate(masks):
        assert mask_ids(mask) == oracle_allowed(dfa, vocabulary, state)
    assert visit.n_unique_masks == len({m.tobytes() for m in masks})
