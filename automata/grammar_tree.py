"""A context-free grammar's rule graph to a regex tree, recursion unrolled to a bound
(docs/grammars.md).

The GBNF and Lark front ends (`corral.automata.gbnf`, `corral.automata.lark`) parse their text into
a `Grammar`: named rules whose bodies are expressions over finished regex trees (`Leaf`), rule
references (`Ref`), sequences, choices and counted repetitions. `unroll` turns it into one regex
tree (`corral.automata.tree`):

- a rule that reaches no rule of its own strongly connected component is expanded once and shared
  by every reference (a DAG, built once per continuation by the NFA builder);
- a rule whose only self-references are a leading one in some alternatives (`a ::= a x | y`,
  left-linear) or a trailing one (`a ::= x a | y`, right-linear), with no other rule of its
  component inside, is rewritten exactly as a repetition (`y x*`, `x* y`);
- any other recursion is unrolled: a rule may occur at most `max_recursion` times on one path
  of the expansion, and a reference past that is the empty language. The language is then exact
  for derivations that nest each rule at most `max_recursion` deep, and never wider than the
  grammar's (it is a subset: only derivations are dropped).

`compile_grammar` builds the DFA and, when the unrolled tree passes a state limit, builds it again
with `max_recursion` one lower, down to 1; when no depth fits it raises `GrammarTooLargeError`
naming the recursive rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.automata.compile import deep_recursion, tree_to_dfa
from corral.automata.dfa import Dfa
from corral.automata.errors import (
    EmptyLanguageError,
    GrammarError,
    GrammarTooLargeError,
    TooManyNfaStatesError,
)
from corral.automata.limits import DEFAULT_LIMITS, Limits
from corral.automata.shallower import STATE_LIMIT_ERRORS, StateLimit, retry_shallower
from corral.automata.tree import EMPTY, Alt, Concat, Node, Repeat

DEFAULT_MAX_RECURSION = 5
"""How many times one recursive rule may occur on a path of the expansion unless the caller says
otherwise (docs/grammars.md: llama.cpp's JSON grammar, 5 levels deep, is 5,461 states)."""

NOTHING = Alt(())
"""The empty language: a reference cut past the recursion bound."""


@dataclass(frozen=True, eq=False)
class Leaf:
    """A finished regex tree (a literal, a character class, a regex terminal)."""

    node: Node


@dataclass(frozen=True, eq=False)
class Ref:
    """A reference to the rule `name`, written at 1-based `line` and `column`."""

    name: str
    line: int
    column: int


@dataclass(frozen=True, eq=False)
class Seq:
    """The items one after another (no items: the empty string)."""

    items: tuple


@dataclass(frozen=True, eq=False)
class Choice:
    """Any one of the items (no items: the empty language)."""

    items: tuple


@dataclass(frozen=True, eq=False)
class Rep:
    """`item` between `min` and `max` times (`max` None: unbounded)."""

    item: object
    min: int
    max: int | None


Expr = Leaf | Ref | Seq | Choice | Rep


@dataclass
class Grammar:
    """A parsed grammar: `rules` maps each rule name to its body, `start` names the start rule,
    `where` maps each rule name to the 1-based (line, column) of its definition."""

    rules: dict[str, Expr]
    start: str
    where: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class CompiledGrammar:
    """What `compile_grammar` built.

    Attributes:
        dfa: the canonical DFA.
        max_recursion: the bound the tree was unrolled with (it may be below the one asked for
            when a deeper unrolling passed a state limit).
        cut_rules: the rules whose recursion was cut at `max_recursion` (sorted); empty when the
            language is exactly the grammar's.
    """

    dfa: Dfa
    max_recursion: int
    cut_rules: tuple[str, ...]

    @property
    def exact(self) -> bool:
        """True when no recursion was cut: the DFA's language is exactly the grammar's."""
        return not self.cut_rules


def references(expr, out: list) -> list:
    """The `Ref`s inside `expr`, in order of appearance, appended to `out`."""
    stack = [expr]
    while stack:
        e = stack.pop()
        if type(e) is Ref:
            out.append(e)
        elif type(e) in (Seq, Choice):
            stack.extend(reversed(e.items))
        elif type(e) is Rep:
            stack.append(e.item)
    return out


def check_references(grammar: Grammar) -> None:
    """Raise GrammarError naming the first reference to an undefined rule (with its line and
    column), or a missing start rule."""
    if grammar.start not in grammar.rules:
        raise GrammarError(1, 1, f"the grammar has no start rule '{grammar.start}'")
    for body in grammar.rules.values():
        for ref in references(body, []):
            if ref.name not in grammar.rules:
                raise GrammarError(
                    ref.line, ref.column, f"rule '{ref.name}' is not defined", rule=ref.name
                )


def components(rules: dict[str, Expr], start: str) -> dict[str, frozenset]:
    """The strongly connected component of every rule reachable from `start` (Tarjan's
    algorithm, iterative; O(rules + references))."""
    edges = {name: [r.name for r in references(body, [])] for name, body in rules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: dict[str, frozenset] = {}
    work = [(start, 0)]
    while work:
        node, i = work.pop()
        if i == 0:
            index[node] = low[node] = len(index)
            stack.append(node)
            on_stack.add(node)
        succ = edges[node]
        if i < len(succ):
            work.append((node, i + 1))
            nxt = succ[i]
            if nxt not in index:
                work.append((nxt, 0))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
            continue
        if low[node] == index[node]:
            members = []
            while True:
                m = stack.pop()
                on_stack.discard(m)
                members.append(m)
                if m == node:
                    break
            scc = frozenset(members)
            for m in members:
                out[m] = scc
        if work:
            parent = work[-1][0]
            low[parent] = min(low[parent], low[node])
    return out


def nullable_rules(rules: dict[str, Expr]) -> set[str]:
    """The rules that derive the empty string (a fixpoint; O(rules x body size) per round)."""
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            if name not in out and nullable(body, out):
                out.add(name)
                changed = True
    return out


def nullable(expr, null_rules: set[str]) -> bool:
    """Whether `expr` derives the empty string, given the nullable rules."""
    kind = type(expr)
    if kind is Leaf:
        return _tree_nullable(expr.node)
    if kind is Ref:
        return expr.name in null_rules
    if kind is Seq:
        return all(nullable(e, null_rules) for e in expr.items)
    if kind is Choice:
        return any(nullable(e, null_rules) for e in expr.items)
    return expr.min == 0 or nullable(expr.item, null_rules)


def _tree_nullable(node) -> bool:
    kind = type(node)
    if kind is Concat:
        return all(_tree_nullable(n) for n in node.items)
    if kind is Alt:
        return any(_tree_nullable(n) for n in node.items)
    if kind is Repeat:
        return node.min == 0 or _tree_nullable(node.item)
    if kind.__name__ == "Automaton":
        return bool(node.dfa.accept[0])
    return False


def first_references(expr, null_rules: set[str], out: list) -> list:
    """The `Ref`s that may stand first in a derivation of `expr` (every item before them
    nullable), appended to `out`."""
    kind = type(expr)
    if kind is Ref:
        out.append(expr)
    elif kind is Seq:
        for e in expr.items:
            first_references(e, null_rules, out)
            if not nullable(e, null_rules):
                break
    elif kind is Choice:
        for e in expr.items:
            first_references(e, null_rules, out)
    elif kind is Rep and expr.max != 0:
        first_references(expr.item, null_rules, out)
    return out


def left_recursive_rule(grammar: Grammar) -> Ref | None:
    """A reference that closes a left-recursive cycle (a rule that can derive itself at its
    leftmost position, through nullable prefixes), or None."""
    null_rules = nullable_rules(grammar.rules)
    firsts = {n: first_references(b, null_rules, []) for n, b in grammar.rules.items()}
    for name in grammar.rules:  # depth-first search of the leftmost-reference graph from `name`
        seen = set()
        stack = list(firsts[name])
        while stack:
            ref = stack.pop()
            if ref.name == name:
                return Ref(name, *grammar.where.get(name, (ref.line, ref.column)))
            if ref.name in seen or ref.name not in firsts:
                continue
            seen.add(ref.name)
            stack.extend(firsts[ref.name])
    return None


def _linear(name: str, body, scc: frozenset):
    """`body` of the self-recursive rule `name` rewritten without recursion when it is left- or
    right-linear (module docstring), else None."""
    alts = body.items if type(body) is Choice else (body,)
    base, left, right = [], [], []
    for alt in alts:
        items = alt.items if type(alt) is Seq else (alt,)
        inside = [r for item in items for r in references(item, []) if r.name in scc]
        if not inside:
            base.append(alt)
        elif len(inside) == 1 and type(items[0]) is Ref and items[0].name == name:
            left.append(Seq(items[1:]))
        elif len(inside) == 1 and type(items[-1]) is Ref and items[-1].name == name:
            right.append(Seq(items[:-1]))
        else:
            return None
    if left and right:
        return None
    loop = Rep(Choice(tuple(left or right)), 0, None)
    rest = Choice(tuple(base))
    return Seq((rest, loop)) if left else Seq((loop, rest))


def _seq(items: list) -> Node:
    if any(i is NOTHING for i in items):
        return NOTHING
    items = [i for i in items if not (type(i) is Concat and not i.items)]
    return items[0] if len(items) == 1 else Concat(tuple(items))


def _alt(items: list) -> Node:
    items = [i for i in items if i is not NOTHING]
    if len(items) == 1:
        return items[0]
    return Alt(tuple(items)) if items else NOTHING


def _repeat(item: Node, low: int, high: int | None) -> Node:
    if item is NOTHING:
        return EMPTY if low == 0 else NOTHING
    if high == 0:
        return EMPTY
    if low == high == 1:
        return item
    return Repeat(item, low, high)


class _Unroller:
    """One expansion of a grammar at one recursion bound (`unroll`)."""

    def __init__(self, grammar: Grammar, max_recursion: int, limits: Limits):
        self.grammar = grammar
        self.rules = dict(grammar.rules)
        self.max_recursion = max_recursion
        self.budget = limits.max_nfa_states
        self.limit = limits.max_nfa_states
        self.scc = components(self.rules, grammar.start)
        for name, scc in list(self.scc.items()):
            if name in {r.name for r in references(self.rules[name], [])}:
                linear = _linear(name, self.rules[name], scc)
                if linear is not None:
                    self.rules[name] = linear
        self.scc = components(self.rules, grammar.start)
        self.recursive = {
            n
            for n, scc in self.scc.items()
            if len(scc) > 1 or n in {r.name for r in references(self.rules[n], [])}
        }
        self.order = {n: tuple(sorted(scc)) for n, scc in self.scc.items()}
        self.memo: dict = {}
        self.cut: set[str] = set()

    def rule(self, name: str, counts: dict[str, int]) -> Node:
        recursive = name in self.recursive
        key = (name, tuple(counts.get(m, 0) for m in self.order[name])) if recursive else name
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        if recursive:
            seen = counts.get(name, 0)
            if seen >= self.max_recursion:
                self.cut.add(name)
                return NOTHING
            inner = {m: c for m, c in counts.items() if m in self.scc[name]}
            inner[name] = seen + 1
        else:
            inner = {}
        self.memo[key] = None  # a rule is never its own key's descendant: counts grow
        out = self.expr(self.rules[name], inner)
        self.memo[key] = out
        return out

    def expr(self, e, counts: dict[str, int]) -> Node:
        self.budget -= 1
        if self.budget < 0:
            raise TooManyNfaStatesError(
                "max_nfa_states", self.limit, "the grammar's unrolled tree is too large"
            )
        kind = type(e)
        if kind is Leaf:
            return e.node
        if kind is Ref:
            return self.rule(e.name, counts)  # `rule` keeps the counts of its own component
        if kind is Seq:
            return _seq([self.expr(i, counts) for i in e.items])
        if kind is Choice:
            return _alt([self.expr(i, counts) for i in e.items])
        return _repeat(self.expr(e.item, counts), e.min, e.max)


def unroll(grammar: Grammar, max_recursion: int, limits: Limits | None = None):
    """The regex tree of `grammar` with recursion unrolled `max_recursion` deep (module
    docstring), and the sorted tuple of the rules whose recursion was cut.

    Raises:
        GrammarError: undefined rule or missing start rule.
        TooManyNfaStatesError: the unrolled tree has more than `limits.max_nfa_states` nodes,
            or nests deeper than Python's stack allows.
    """
    check_references(grammar)
    limits = limits or DEFAULT_LIMITS
    unroller = _Unroller(grammar, max(1, max_recursion), limits)
    try:
        with deep_recursion():
            tree = unroller.rule(grammar.start, {})
    except RecursionError:
        raise _too_deep(limits) from None
    return tree, tuple(sorted(unroller.cut))


def _too_deep(limits: Limits) -> TooManyNfaStatesError:
    """The error for a derivation nested deeper than Python's stack allows (`deep_recursion`):
    counted as a state limit, so a recursive grammar is unrolled again shallower."""
    return TooManyNfaStatesError(
        "max_nfa_states", limits.max_nfa_states, "the grammar's rules nest too deep to build"
    )


def recursive_rules(grammar: Grammar) -> tuple[str, ...]:
    """The rules reachable from the start that are unrolled (recursive after the left- and
    right-linear rewriting), sorted."""
    check_references(grammar)
    return tuple(sorted(_Unroller(grammar, 1, DEFAULT_LIMITS).recursive))


def _names(rules: tuple[str, ...], most: int = 10) -> str:
    """The rule names for a message, the first `most` and a count of the rest."""
    shown = ", ".join(rules[:most])
    return shown + (f" and {len(rules) - most} more" if len(rules) > most else "")


def compile_grammar(
    grammar: Grammar, limits: Limits | None = None, max_recursion: int | None = None
) -> CompiledGrammar:
    """The canonical DFA of `grammar` (a `CompiledGrammar`: the DFA, the bound used and the rules
    cut). Recursion is unrolled `max_recursion` deep (default `DEFAULT_MAX_RECURSION`); when the
    tree or DFA of a recursive grammar passes a state limit of `limits`, it is unrolled again one
    level shallower, down to 1.

    Raises:
        ValueError: `max_recursion` below 1.
        GrammarError: an undefined rule, a missing start rule.
        EmptyLanguageError: the grammar derives no string within the bound (say `a ::= "x" a`).
        GrammarTooLargeError: a recursive grammar passes a state limit at every depth; it names
            the recursive rules and the limit.
        LimitError: a grammar with no recursion to unroll passes a limit.
    """
    depth = DEFAULT_MAX_RECURSION if max_recursion is None else max_recursion
    if depth < 1:
        raise ValueError(f"max_recursion must be at least 1, got {max_recursion}")
    recursive = recursive_rules(grammar)

    def attempt(d: int) -> CompiledGrammar:
        try:
            tree, cut = unroll(grammar, d, limits)
            try:
                dfa = tree_to_dfa(tree, limits)
            except RecursionError:
                raise _too_deep(limits or DEFAULT_LIMITS) from None
        except STATE_LIMIT_ERRORS as error:
            raise StateLimit(error, bool(recursive), d) from None
        except EmptyLanguageError as error:
            where = f" (recursion of {_names(cut)} cut at depth {d})" if cut else ""
            raise EmptyLanguageError(f"the grammar derives no string{where}") from error
        return CompiledGrammar(dfa, d, cut)

    try:
        return retry_shallower(attempt, depth, stop=())[0]
    except STATE_LIMIT_ERRORS as first:
        if not recursive:
            raise
        error = first
    raise GrammarTooLargeError(
        error.limit,
        error.value,
        f"the grammar passes a state limit even with its recursive rules "
        f"({_names(recursive)}) unrolled 1 deep",
        rules=recursive,
    ) from error
