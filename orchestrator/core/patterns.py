"""Schema patterns matched in time linear in the string: no backtracking.

Python's ``re`` backtracks: ``^(a+)+$`` takes seconds on 25 a's and a ``!`` (twice as long per
``a`` more), and even ``\\d+$`` takes seconds on 20,000 digits and an ``x``, all that time
holding the interpreter's lock, so no other task (not the run's deadline) can act. A pattern in a
tool's schema meets strings a model chose, so :func:`compile_pattern` parses it with ``re``'s own
parser (the same syntax and character classes) and runs it as a Thompson NFA (Pike's VM without
captures): every state at every position at most once, so a search costs at most the string's
length times the pattern's size, in Python bytecode (which lets other threads run).

What it covers: literals, ``.``, classes (ranges, ``\\d \\w \\s`` and their negations), groups,
alternation, greedy and lazy repeats with any bounds, ``^ $ \\A \\Z \\b \\B``. A pattern with
flags (``(?i)``...), lookarounds, backreferences, atomic groups or possessive repeats, or that
would compile to more than :data:`_MAX_PROGRAM` instructions, is not compiled here
(:func:`compile_pattern` returns ``None``): the caller matches it with ``re``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any, Final

__all__ = ["compile_pattern"]

_MAX_PROGRAM: Final = 20_000
"""Instructions a pattern may compile to (``x{1000}`` is a thousand)."""

_MAX_MEMO: Final = 20_000
"""Entries each memo of a pattern's matcher keeps (state sets by character and position)."""

_CHAR, _SPLIT, _JMP, _ASSERT, _MATCH = range(5)


class _Unsupported(Exception):
    pass


def compile_pattern(pattern: str) -> Callable[[str], bool] | None:
    """``re.search(pattern, s) is not None`` as a function of ``s`` that runs in linear time,
    or ``None`` when the pattern uses what this matcher does not (see the module's text)."""
    try:  # re's own parser (Python 3.11+): the syntax and classes are exactly re's
        c = importlib.import_module("re._constants")
        _parser = importlib.import_module("re._parser")
    except ImportError:  # a Python whose re keeps its parser elsewhere: re matches instead
        return None
    try:
        tree = _parser.parse(pattern)
    except (re.error, RecursionError):
        return None
    if tree.state.flags & ~(c.SRE_FLAG_UNICODE | c.SRE_FLAG_VERBOSE):
        return None
    program: list[tuple[Any, ...]] = []
    try:
        _emit(list(tree), program, c)
    except (_Unsupported, RecursionError):
        return None
    program.append((_MATCH,))
    anchored = bool(tree) and next(iter(tree)) in (
        (c.AT, c.AT_BEGINNING),
        (c.AT, c.AT_BEGINNING_STRING),
    )
    return _searcher(program, anchored, c)


def _emit(items: list[tuple[Any, Any]], program: list[tuple[Any, ...]], c: Any) -> None:
    for op, av in items:
        if len(program) > _MAX_PROGRAM:
            raise _Unsupported
        if op is c.LITERAL:
            program.append((_CHAR, _literal(chr(av))))
        elif op is c.NOT_LITERAL:
            program.append((_CHAR, _not_literal(chr(av))))
        elif op is c.ANY:
            program.append((_CHAR, _not_literal("\n")))
        elif op is c.IN:
            program.append((_CHAR, _in_set(av, c)))
        elif op is c.SUBPATTERN:
            _group, add_flags, del_flags, body = av
            if add_flags or del_flags:
                raise _Unsupported
            _emit(list(body), program, c)
        elif op is c.BRANCH:
            _branch([list(b) for b in av[1]], program, c)
        elif op is c.MAX_REPEAT or op is c.MIN_REPEAT:  # lazy or greedy: the same language
            low, high, body = av
            _repeat(list(body), low, high, program, c)
        elif op is c.AT:
            if av not in (
                c.AT_BEGINNING,
                c.AT_BEGINNING_STRING,
                c.AT_END,
                c.AT_END_STRING,
                c.AT_BOUNDARY,
                c.AT_NON_BOUNDARY,
            ):
                raise _Unsupported
            program.append((_ASSERT, av))
        else:  # lookarounds, backreferences, atomic groups, possessive repeats...
            raise _Unsupported


def _branch(options: list[list[tuple[Any, Any]]], program: list[tuple[Any, ...]], c: Any) -> None:
    jumps = []
    for i, option in enumerate(options):
        if i < len(options) - 1:
            split = len(program)
            program.append((_SPLIT, split + 1, -1))  # the other end patched below
            _emit(option, program, c)
            jumps.append(len(program))
            program.append((_JMP, -1))
            program[split] = (_SPLIT, split + 1, len(program))
        else:
            _emit(option, program, c)
    for at in jumps:
        program[at] = (_JMP, len(program))


def _repeat(
    body: list[tuple[Any, Any]], low: int, high: int, program: list[tuple[Any, ...]], c: Any
) -> None:
    if low > _MAX_PROGRAM or (high != c.MAXREPEAT and high > _MAX_PROGRAM):
        raise _Unsupported
    for _ in range(low):
        _emit(body, program, c)
    if high == c.MAXREPEAT:  # L: split(body, out); body; jmp L
        loop = len(program)
        program.append((_SPLIT, loop + 1, -1))
        _emit(body, program, c)
        program.append((_JMP, loop))
        program[loop] = (_SPLIT, loop + 1, len(program))
        return
    splits = []
    for _ in range(high - low):  # each optional copy: split(body, out)
        splits.append(len(program))
        program.append((_SPLIT, -1, -1))
        _emit(body, program, c)
    for at in splits:
        program[at] = (_SPLIT, at + 1, len(program))


def _literal(char: str) -> Callable[[str], bool]:
    return char.__eq__


def _not_literal(char: str) -> Callable[[str], bool]:
    return char.__ne__


def _category(name: Any, c: Any) -> Callable[[str], bool]:
    """A class escape as ``re`` reads it in a str pattern (Unicode)."""
    tests: dict[Any, Callable[[str], bool]] = {
        c.CATEGORY_DIGIT: str.isdecimal,
        c.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
        c.CATEGORY_SPACE: str.isspace,
        c.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
        c.CATEGORY_WORD: _is_word,
        c.CATEGORY_NOT_WORD: lambda ch: not _is_word(ch),
    }
    if name not in tests:
        raise _Unsupported
    return tests[name]


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _in_set(items: list[tuple[Any, Any]], c: Any) -> Callable[[str], bool]:
    negate = False
    chars: set[str] = set()
    ranges: list[tuple[int, int]] = []
    categories: list[Callable[[str], bool]] = []
    for op, av in items:
        if op is c.NEGATE:
            negate = True
        elif op is c.LITERAL:
            chars.add(chr(av))
        elif op is c.RANGE:
            ranges.append(av)
        elif op is c.CATEGORY:
            categories.append(_category(av, c))
        else:  # a class form re's parser makes of other flags
            raise _Unsupported

    def test(ch: str) -> bool:
        found = (
            ch in chars
            or any(low <= ord(ch) <= high for low, high in ranges)
            or any(category(ch) for category in categories)
        )
        return found is not negate

    return test


def _searcher(program: list[tuple[Any, ...]], anchored: bool, c: Any) -> Callable[[str], bool]:
    return _Searcher(program, anchored, c).search


class _Searcher:
    """Runs a compiled program over a string: the set of live states, position by position.

    The sets met are remembered (a lazy DFA): the next set from a set and a character, and the
    states a set reaches without reading, keyed by what the assertions can see at a position
    (the ends, and for ``\\b`` the characters beside it). A string then costs a few dictionary
    lookups per character; the memory is capped (:data:`_MAX_MEMO` entries, then forgotten).
    """

    def __init__(self, program: list[tuple[Any, ...]], anchored: bool, c: Any) -> None:
        self.program = program
        self.anchored = anchored
        self.c = c
        kinds = {i[1] for i in program if i[0] == _ASSERT}
        self.boundaries = bool(kinds & {c.AT_BOUNDARY, c.AT_NON_BOUNDARY})
        self.steps: dict[tuple[tuple[int, ...], str], tuple[int, ...]] = {}
        self.closures: dict[tuple[Any, ...], tuple[int, ...]] = {}

    def holds(self, kind: Any, text: str, pos: int) -> bool:
        c = self.c
        if kind is c.AT_BEGINNING or kind is c.AT_BEGINNING_STRING:
            return pos == 0
        if kind is c.AT_END:  # $: the end, or before a final newline
            return pos == len(text) or (pos == len(text) - 1 and text[pos] == "\n")
        if kind is c.AT_END_STRING:
            return pos == len(text)
        if not text:  # re's \b and \B never match in an empty string
            return False
        before = pos > 0 and _is_word(text[pos - 1])
        after = pos < len(text) and _is_word(text[pos])
        return (before != after) is (kind is c.AT_BOUNDARY)

    def closure(self, starts: tuple[int, ...], text: str, pos: int) -> tuple[int, ...]:
        """The character-reading states reachable from ``starts`` without reading; -1 stands
        for a match."""
        n = len(text)
        end = 0 if pos == n else 1 if pos == n - 1 and text[pos] == "\n" else 2
        key: tuple[Any, ...] = (starts, pos == 0, end)
        if self.boundaries:
            key += (n == 0, pos > 0 and _is_word(text[pos - 1]), pos < n and _is_word(text[pos]))
        found = self.closures.get(key)
        if found is not None:
            return found
        program = self.program
        seen: set[int] = set()
        out: list[int] = []
        stack = list(reversed(starts))
        while stack:
            pc = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            instruction = program[pc]
            kind = instruction[0]
            if kind == _CHAR:
                out.append(pc)
            elif kind == _SPLIT:
                stack.append(instruction[2])
                stack.append(instruction[1])
            elif kind == _JMP:
                stack.append(instruction[1])
            elif kind == _ASSERT:
                if self.holds(instruction[1], text, pos):
                    stack.append(pc + 1)
            else:
                out.append(-1)
        found = tuple(out)
        self.remember(self.closures, key, found)
        return found

    def step(self, states: tuple[int, ...], ch: str) -> tuple[int, ...]:
        """The states after reading ``ch`` (and, unanchored, a match starting after it)."""
        found = self.steps.get((states, ch))
        if found is None:
            program = self.program
            advanced = [pc + 1 for pc in states if pc >= 0 and program[pc][1](ch)]
            if not self.anchored:
                advanced.append(0)  # a match may start at the next position too
            found = tuple(advanced)
            self.remember(self.steps, (states, ch), found)
        return found

    @staticmethod
    def remember(memo: dict[Any, tuple[int, ...]], key: Any, value: tuple[int, ...]) -> None:
        if len(memo) >= _MAX_MEMO:
            memo.clear()  # a string of many different characters: start again, still linear
        memo[key] = value

    def search(self, text: str) -> bool:
        states = self.closure((0,), text, 0)
        for pos, ch in enumerate(text):
            if -1 in states:
                return True
            advanced = self.step(states, ch)
            if not advanced:
                return False
            states = self.closure(advanced, text, pos + 1)
        return -1 in states
