"""`multipleOf` (docs/design.md section 3, beyond the subset): the integers divisible by a step, as
a product of a decimal range automaton with the remainder of the digits read so far.

Divisibility of a decimal integer by k is a k-state property of its digits (reading digit d
takes remainder r to (10 r + d) mod k). The range DFA (`corral.automata.schema.numbers`) is
acyclic because the range is finite, so the product over (range state, remainder) is a DAG,
written as a regex tree with shared nodes like `corral.automata.schema.lengths.length_product`.

What `jsonschema` accepts decides the steps (its check is `instance % k` for an integer step
and `instance / step` in floats for a float one):
- an integer step k (or an integral float): integers divisible by k, also for `number` schemas
  (a sub-language: `10.0` is not written);
- a float step within 2**-54 (relative) of 1/m for an integer m (0.01, 0.001, 0.5 and so on,
  but not 0.1, whose float quotients of integers are not exact: `3 / 0.1` is
  30.000000000000004): integers x with |x * m| < 2**53, for which x / step rounds to the
  integer x * m (a sub-language of the decimals validators accept);
- other steps are refused naming `multipleOf`.
"""

from __future__ import annotations

from fractions import Fraction

from corral.automata.compile import build_dfa
from corral.automata.errors import SchemaError
from corral.automata.parse import parse
from corral.automata.schema.keywords import unsupported, written
from corral.automata.schema.values import is_number
from corral.automata.tree import EMPTY, Alt, ByteSet, Concat, Node

MAX_STEP = 1_000
"""Largest integer step compiled (the product has up to range states x step nodes)."""

MAX_UNBOUNDED_MULTIPLE = 10**12 - 1
"""With a step other than 1, an unbounded side of the range stops at this magnitude (a
sub-language, as `maxLength` is capped): it keeps the product's digits, and its states, few."""


def integer_step(value, pointer: str) -> tuple[int, int]:
    """(k, largest magnitude) for `multipleOf: value`: the integers x with x % k == 0 and
    |x| <= largest validate (largest None: no cap of its own).

    Raises:
        SchemaError (keyword `multipleOf`): not a number > 0, or a step outside those the
            module docstring lists, or an integer step above `MAX_STEP`.
    """
    if not is_number(value) or value <= 0:
        raise SchemaError(pointer, "multipleOf", "multipleOf must be a number greater than 0")
    if isinstance(value, float) and not value.is_integer():
        inverse = 1 / value  # inf for a subnormal step
        if not inverse < 2**53:
            raise unsupported(pointer, "multipleOf", f"multipleOf {value!r}")
        m = round(inverse)
        if m < 1 or abs(Fraction(value) * m - 1) >= Fraction(1, 2**54):
            raise unsupported(pointer, "multipleOf", f"multipleOf {value!r}")
        return 1, (2**53 - 1) // m
    k = int(value)
    if k > MAX_STEP:
        raise unsupported(pointer, "multipleOf", f"multipleOf {written(value)} is above {MAX_STEP}")
    return k, None


def divisible_product(range_text: str, k: int) -> Node | None:
    """The regex tree of the strings of the (finite) language `range_text` (canonical decimal
    integers, an optional `-`) whose digits form a multiple of k, None when there is none;
    O(states x k) nodes."""
    dfa = build_dfa(parse(range_text))
    rows = dfa.trans.tolist()
    memo: dict[tuple[int, int], Node] = {}

    def node(state: int, remainder: int) -> Node:
        key = (state, remainder)
        if key in memo:
            return memo[key]
        edges: dict[tuple[int, int], int] = {}
        for byte, target in enumerate(rows[state]):
            if target < 0:
                continue
            digit = byte - 0x30
            after = (remainder * 10 + digit) % k if 0 <= digit <= 9 else remainder
            edges[(target, after)] = edges.get((target, after), 0) | (1 << byte)
        items = []
        for (t, r), mask in edges.items():
            after = node(t, r)
            if after is not None:
                items.append(Concat((ByteSet(mask), after)))
        if dfa.accept[state] and remainder == 0:
            items.append(EMPTY)
        out = Alt(tuple(items)) if items else None
        memo[key] = out
        return out

    return node(0, 0)
