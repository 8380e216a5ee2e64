"""Parse COGRA query text into the typed syntax tree of :mod:`cogra.language.ast`.

Recursive descent with one method per clause, over the tokens of :mod:`.tokens`.
WHERE conditions are not parsed here: each conjunct's *text* is handed to sqlglot,
so the expression language is SQL's rather than a home-grown one, and the result
is checked and lightly rewritten (``NEXT(V).attr`` becomes the 3-part column
described by :data:`~cogra.language.ast.NEXT_MARKER`).

Everything that can be checked without a schema is checked here, and every
problem raises :class:`~cogra.errors.QueryError` with the span of the offending
text, so later stages only see well-formed queries.

Rules of docs/language.md (Queries, Output) that the parser decides:

- ``ReturnItem.text`` (the default column name) is the item as written with all
  whitespace removed, keeping the user's spelling: ``count( * )`` -> ``count(*)``.
  A valid item never needs an inner space, so nothing is lost.
- Output column names clash case-insensitively, as Spark's do; so do attribute
  names when RETURN is matched against GROUP-BY.  Variable names are
  case-sensitive (they bind event types, which are data).  Keywords, aggregate
  names, semantics and time units are case-insensitive.
- Clause keywords (RETURN, PATTERN, SEMANTICS, WHERE, GROUP, WITHIN, SLIDE) are
  reserved: they cannot name types, variables or attributes, except after a dot.
- A top-level OR in a WHERE that has several conjuncts is rejected: the grammar
  splits conjuncts at AND, which would silently contradict SQL's AND-before-OR
  precedence (``a OR b AND c``).  Parentheses make it legal.
- One trailing ``;`` is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction

import sqlglot
import sqlglot.errors
import sqlglot.expressions as exp

from cogra.errors import QueryError
from cogra.language.ast import (
    AGG_ALIASES,
    NEXT_MARKER,
    UNIT_SECONDS,
    Aggregate,
    AggFunc,
    Alt,
    AttrRef,
    ColumnRef,
    Condition,
    Conjunct,
    Duration,
    Equivalence,
    Opt,
    Pattern,
    Plus,
    Not,
    Query,
    Repeat,
    ReturnItem,
    Semantics,
    Seq,
    Span,
    Star,
    Var,
    Window,
    matches_nothing,
    negations,
    pattern_variables,
)
from cogra.language.limits import MAX_CONDITION_TOKENS, with_recursion_room
from cogra.language.tokens import Kind, Source, Token, check_brackets, tokenize

__all__ = ["parse", "dump", "condition_sql"]

CLAUSE_ORDER = ("RETURN", "PATTERN", "SEMANTICS", "WHERE", "GROUP-BY", "WITHIN")
_CLAUSE_WORDS = frozenset({"RETURN", "PATTERN", "SEMANTICS", "WHERE", "WITHIN", "SLIDE"})
_WINDOW_COLUMNS = ("window_start", "window_end")

_SEMANTICS = {
    "skip-till-any-match": Semantics.ANY,
    "any": Semantics.ANY,
    "skip-till-next-match": Semantics.NEXT,
    "next": Semantics.NEXT,
    "contiguous": Semantics.CONT,
    "cont": Semantics.CONT,
}

_POSTFIX = {"+": Plus, "*": Star, "?": Opt}
MAX_REPEAT = 64
"""The largest count a bounded quantifier may name: each repetition of a variable is a
state of the automaton, and the engine keeps at most 64 (analysis.binding.MAX_VARIABLES)."""

_NOT_AN_ATTRIBUTE = "is not an attribute: write V.attr, NEXT(V).attr or attr"
_ITEM_HELP = "an attribute, COUNT(*), COUNT(V) or MIN|MAX|SUM|AVG|VAR_POP|VAR_SAMP|STDDEV_POP|STDDEV_SAMP(V.attr)"


def _unit_list() -> str:
    """``ms, millisecond(s), s, sec(s), ...``: the valid units, plural forms folded."""
    names = [u for u in UNIT_SECONDS if not (u.endswith("s") and u[:-1] in UNIT_SECONDS)]
    return ", ".join(f"{u}(s)" if u + "s" in UNIT_SECONDS else u for u in names)


def _join(names: list[str]) -> str:
    return ", ".join(names)


@with_recursion_room
def parse(text: str) -> Query:
    """Parse one query; raise :class:`QueryError` (with line and column) if it is bad."""
    return _Parser(text).query()


class _Parser:
    """Single-use parser state: the tokens, a cursor and the pattern's variables."""

    def __init__(self, text: str):
        self.text = text
        self.source = Source(text)
        self.tokens = tokenize(self.source)
        if len(self.tokens) > 1 and self.tokens[-2].is_punct(";"):  # one trailing ';'
            del self.tokens[-2]
        check_brackets(self.tokens, self.source)
        self.pos = 0
        self.variables: dict[str, Var] = {}
        self.return_variable_refs: list[tuple[str, Span]] = []

    # -- token helpers --------------------------------------------------------

    def at(self, i: int) -> Token:
        return self.tokens[min(i, len(self.tokens) - 1)]

    def peek(self, ahead: int = 0) -> Token:
        return self.at(self.pos + ahead)

    def advance(self) -> Token:
        tok = self.peek()
        if tok.kind is not Kind.EOF:
            self.pos += 1
        return tok

    def error(self, message: str, span: Span) -> QueryError:
        return QueryError(message, self.text, span)

    def span(self, start: int, end: int) -> Span:
        return self.source.span(start, end)

    def word(self, i: int) -> str | None:
        """The upper-cased word at token ``i``, unless it is not a word or follows a dot."""
        tok = self.at(i)
        if tok.kind is not Kind.IDENT or (i > 0 and self.at(i - 1).is_punct(".")):
            return None
        return tok.text.upper()

    def clause_at(self, i: int | None = None) -> tuple[str, int] | None:
        """``(clause name, number of tokens)`` if a clause keyword starts at token ``i``."""
        i = self.pos if i is None else i
        w = self.word(i)
        if w == "GROUP":
            if self.word(i + 1) == "BY":
                return "GROUP-BY", 2
            if self.at(i + 1).is_punct("-") and self.word(i + 2) == "BY":
                return "GROUP-BY", 3
            return None
        return (w, 1) if w in _CLAUSE_WORDS else None

    def expect(self, char: str, message: str) -> Token:
        tok = self.peek()
        if not tok.is_punct(char):
            raise self.error(f"{message}, found {tok.describe()}", tok.span)
        return self.advance()

    def name(self, what: str) -> Token:
        """A plain identifier that is not a clause keyword."""
        tok = self.peek()
        if tok.kind is not Kind.IDENT or self.clause_at() is not None:
            raise self.error(f"expected {what}, found {tok.describe()}", tok.span)
        return self.advance()

    def starts_line(self, tok: Token) -> bool:
        line_start = tok.start - (tok.span.column - 1)
        return not self.text[line_start : tok.start].strip()

    # -- the query ------------------------------------------------------------

    def query(self) -> Query:
        first = self.peek()
        if self.clause_at() != ("RETURN", 1):
            raise self.error(f"a query starts with RETURN, found {first.describe()}", first.span)
        self.advance()
        returns = self.return_clause()
        pattern_keyword = self.pattern_keyword()
        pattern = self.pattern_clause()
        for name, span in self.return_variable_refs:
            self.check_variable(name, span)
        seen = {"RETURN": first, "PATTERN": pattern_keyword}
        semantics, where, group_by, window = self.optional_clauses(seen)
        self.check_returns(returns, group_by, window)
        return Query(self.text, returns, pattern, semantics, where, group_by, window)

    def optional_clauses(
        self, seen: dict[str, Token]
    ) -> tuple[Semantics, tuple[Conjunct, ...], tuple[AttrRef, ...], Window | None]:
        """SEMANTICS, WHERE, GROUP-BY and WITHIN, each at most once and in that order."""
        semantics = Semantics.ANY
        where: tuple[Conjunct, ...] = ()
        group_by: tuple[AttrRef, ...] = ()
        window: Window | None = None
        last = "PATTERN"
        while self.peek().kind is not Kind.EOF:
            tok = self.peek()
            clause = self.clause_at()
            if clause is None:
                raise self.unexpected_after(last)
            name, width = clause
            keyword_span = self.span(tok.start, self.at(self.pos + width - 1).end)
            if name == "SLIDE":
                if window is None:
                    raise self.error("SLIDE without WITHIN: write WITHIN <size> SLIDE <step>", keyword_span)
                raise self.error("duplicate SLIDE", keyword_span)
            if name in seen:
                other = seen[name].span
                raise self.error(
                    f"duplicate {name} clause (the first is at line {other.line}, column {other.column})",
                    keyword_span,
                )
            if CLAUSE_ORDER.index(name) < CLAUSE_ORDER.index(last):
                raise self.error(
                    f"{name} must come before {last} (clause order: {_join(list(CLAUSE_ORDER))})",
                    keyword_span,
                )
            self.pos += width
            if name == "SEMANTICS":
                semantics = self.semantics_clause()
            elif name == "WHERE":
                where = self.where_clause()
            elif name == "GROUP-BY":
                group_by = self.group_by_clause()
            else:
                window = self.window_clause(tok)
            seen[name] = tok
            last = name
        return semantics, where, group_by, window

    def unexpected_after(self, last: str) -> QueryError:
        tok = self.peek()
        expected = list(CLAUSE_ORDER[CLAUSE_ORDER.index(last) + 1 :]) + ["the end of the query"]
        options = f"{_join(expected[:-1])} or {expected[-1]}" if len(expected) > 1 else expected[0]
        if tok.kind is Kind.IDENT and self.starts_line(tok):
            return self.error(f"unknown clause {tok.text}; expected {options}", tok.span)
        message = f"unexpected {tok.describe()} after the {last} clause; expected {options}"
        return self.error(message, tok.span)

    # -- RETURN ---------------------------------------------------------------

    def return_clause(self) -> tuple[ReturnItem, ...]:
        tok = self.peek()
        if tok.kind is Kind.EOF or self.clause_at() is not None:
            raise self.error("empty RETURN: name at least one item, e.g. RETURN COUNT(*)", tok.span)
        items = [self.return_item()]
        while self.peek().is_punct(","):
            self.advance()
            items.append(self.return_item())
        return tuple(items)

    def return_item(self) -> ReturnItem:
        first_index, first = self.pos, self.peek()
        if first.kind is not Kind.IDENT or self.clause_at() is not None:
            raise self.error(f"expected a RETURN item ({_ITEM_HELP}), found {first.describe()}", first.span)
        value: AttrRef | Aggregate
        if self.peek(1).is_punct("("):
            value = self.aggregate()
        else:
            value = self.attr_ref("an attribute")
            if value.variable is not None:
                self.return_variable_refs.append((value.variable, self.variable_span(value)))
        text = "".join(t.text for t in self.tokens[first_index : self.pos])
        alias = None
        if self.word(self.pos) == "AS":
            self.advance()
            alias = self.alias()
        return ReturnItem(value, alias, text, self.span(first.start, self.at(self.pos - 1).end))

    def alias(self) -> str:
        """An identifier, or a ``"double"``/```back```-quoted name (quotes escaped by doubling)."""
        tok = self.peek()
        if tok.kind is not Kind.QUOTED:
            return self.name("a column name after AS").text
        quote = tok.text[0]
        name = tok.text[1:-1].replace(quote * 2, quote)
        if not name.strip():
            raise self.error("empty column name after AS", tok.span)
        self.advance()
        return name

    def aggregate(self) -> Aggregate:
        func_tok = self.advance()
        name = func_tok.text.upper()
        try:
            func = AGG_ALIASES[name] if name in AGG_ALIASES else AggFunc(name)
        except ValueError:
            allowed = _join([f.value for f in AggFunc] + list(AGG_ALIASES))
            message = f"unknown aggregate {func_tok.text} (allowed: {allowed})"
            raise self.error(message, func_tok.span) from None
        self.advance()  # "("
        star: Token | None = None
        variable: Token | None = None
        attribute: Token | None = None
        if self.peek().is_punct("*"):
            star = self.advance()
        elif self.peek().kind is Kind.IDENT:
            variable = self.advance()
            if self.peek().is_punct("."):
                self.advance()
                attribute = self.name(f"an attribute after {variable.text}.")
        close = self.expect(")", f"expected ')' to close {func_tok.text}(")
        span = self.span(func_tok.start, close.end)
        var_text = variable.text if variable else "V"
        if func is AggFunc.COUNT:
            if attribute is not None:
                message = f"COUNT takes * or a variable, not an attribute: COUNT(*) or COUNT({var_text})"
                raise self.error(message, span)
            if star is None and variable is None:
                raise self.error("COUNT needs an argument: COUNT(*) or COUNT(V)", span)
        elif attribute is None:
            example = f"{func.value}({var_text}.attr)"
            raise self.error(f"{func.value} needs a variable's attribute, e.g. {example}", span)
        if variable is not None:
            self.return_variable_refs.append((variable.text, variable.span))
        return Aggregate(
            func,
            variable.text if variable else None,
            attribute.text if attribute else None,
            span,
        )

    def attr_ref(self, what: str) -> AttrRef:
        """``attr`` or ``V.attr``."""
        first = self.name(what)
        if not self.peek().is_punct("."):
            return AttrRef(None, first.text, first.span)
        self.advance()
        second = self.name(f"an attribute after {first.text}.")
        return AttrRef(first.text, second.text, self.span(first.start, second.end))

    def variable_span(self, attr: AttrRef) -> Span:
        """The span of the ``V`` in ``V.attr``."""
        return self.span(attr.span.start, attr.span.start + len(attr.variable or ""))

    # -- PATTERN --------------------------------------------------------------

    def pattern_keyword(self) -> Token:
        tok = self.peek()
        clause = self.clause_at()
        if clause == ("PATTERN", 1):
            return self.advance()
        if clause is not None or tok.kind is Kind.EOF:
            raise self.error("missing PATTERN clause after RETURN", tok.span)
        message = f"unexpected {tok.describe()} after a RETURN item; expected ',' or PATTERN"
        raise self.error(message, tok.span)

    def pattern_clause(self) -> Pattern:
        first = self.peek()
        pattern = self.alternation()
        self.bind_variables(pattern, self.span(first.start, self.at(self.pos - 1).end))
        self.check_negations(pattern)
        return pattern

    def check_negations(self, pattern: Pattern) -> None:
        """``NOT N`` stands between two parts of a SEQ that cannot match nothing
        (docs/language.md, Negation): elsewhere there is no pair of trend events for it to
        block -- except at the start or end of the whole pattern's SEQ (absence,
        docs/language.md, Absence at the edge of a pattern), where it blocks the trends that
        some event of ``N`` precedes or follows in their window."""
        allowed = set()
        if isinstance(pattern, Not) or (isinstance(pattern, Seq) and all(isinstance(i, Not) for i in pattern.items)):
            raise self.error("a pattern of negations alone matches no trend; a NOT needs the events "
                             "it guards, as in SEQ(A, NOT N)", pattern.span)

        def walk(p: Pattern) -> None:
            if isinstance(p, Seq):
                for i, item in enumerate(p.items):
                    if not isinstance(item, Not):
                        continue
                    before = p.items[i - 1] if i > 0 else None
                    after = p.items[i + 1] if i + 1 < len(p.items) else None
                    for side, part in (("before", before), ("after", after)):
                        if part is None and p is pattern:
                            continue  # absence at the whole pattern's edge (docs/language.md)
                        if part is None:
                            where = "at the start" if side == "before" else "at the end"
                            raise self.error(f"{item.text} stands {where} of a SEQ inside the pattern; only "
                                             "the whole pattern's SEQ may start or end with NOT (absence, "
                                             "as in SEQ(A, NOT N)); elsewhere a NOT must stand between two "
                                             "parts of its SEQ, as in SEQ(A, NOT N, B)", item.span)
                        if isinstance(part, Not):
                            raise self.error(f"{item.text} is next to another negation; write one NOT "
                                             "between two parts of the SEQ", item.span)
                        if matches_nothing(part):
                            raise self.error(f"the part {side} {item.text} can match nothing, so it would "
                                             "not always have events to guard; the parts right before and "
                                             "after a NOT must each match at least one event", item.span)
                    allowed.add(id(item))
            if isinstance(p, (Var, Not)):
                return
            for part in (p.items if isinstance(p, Seq) else p.options if isinstance(p, Alt) else (p.inner,)):
                walk(part)

        walk(pattern)
        for n in negations(pattern):
            if id(n) not in allowed:
                raise self.error(f"{n.text} must stand between two parts of a SEQ, as in SEQ(A, NOT N, B)",
                                 n.span)

    def alternation(self) -> Pattern:
        options = [self.postfix()]
        while self.peek().is_punct("|"):
            self.advance()
            options.append(self.postfix())
        if len(options) == 1:
            return options[0]
        return Alt(tuple(options), self.span(options[0].span.start, options[-1].span.end))

    def postfix(self) -> Pattern:
        first = self.peek()
        node = self.primary()
        if isinstance(node, Not) and self.peek().is_punct("+*?{"):
            raise self.error(f"{node.text} takes no quantifier: a negated event is in no trend, it only "
                             "blocks the pairs that cross it", self.peek().span)
        while self.peek().is_punct("+*?{"):
            if self.peek().is_punct("{"):
                node = self.bounded(node, first)
                continue
            op = self.advance()
            node = _POSTFIX[op.text](node, self.span(first.start, op.end))
        return node

    def bounded(self, inner: Pattern, first: Token) -> Repeat:
        """``{n}``, ``{n,}`` or ``{n,m}`` after a sub-pattern (docs/language.md, Bounded
        quantifiers)."""
        brace = self.advance()
        usage = "write P{n}, P{n,} or P{n,m} with whole numbers 0 <= n <= m, m >= 1"

        def count() -> int:
            tok = self.peek()
            if tok.kind is not Kind.NUMBER or not tok.text.isdigit():
                raise self.error(f"expected a whole number in the quantifier, found {tok.describe()}; {usage}",
                                 tok.span)
            self.advance()
            value = int(tok.text)
            if value > MAX_REPEAT:
                raise self.error(f"{value} repetitions: cogra evaluates quantifiers up to {MAX_REPEAT} (each "
                                 "repetition is a state of the automaton, at most 64)", tok.span)
            return value

        low = count()
        high: int | None = low
        if self.peek().is_punct(","):
            self.advance()
            high = None if self.peek().is_punct("}") else count()
        close = self.peek()
        if not close.is_punct("}"):
            raise self.error(f"expected '}}' to close the quantifier, found {close.describe()}; {usage}", close.span)
        self.advance()
        span = self.span(first.start, close.end)
        if high is not None and high < low:
            raise self.error(f"quantifier {{{low},{high}}}: its most ({high}) is below its least ({low}); "
                             f"{usage}", self.span(brace.start, close.end))
        if high == 0:
            raise self.error("a quantifier of at most 0 repetitions matches nothing; " + usage,
                             self.span(brace.start, close.end))
        return Repeat(inner, low, high, span)

    def primary(self) -> Pattern:
        tok = self.peek()
        if tok.is_punct("("):
            self.advance()
            inner = self.alternation()
            self.expect(")", "expected ')' to close the '(' of the pattern")
            return inner
        if tok.kind is Kind.IDENT and self.clause_at() is None:
            if tok.text.upper() == "SEQ" and self.peek(1).is_punct("("):
                return self.seq()
            if tok.text.upper() == "NOT":
                # NOT is a keyword in patterns (docs/language.md, Negation), never an event type.
                self.advance()
                inner = self.peek()
                if inner.kind is not Kind.IDENT or self.clause_at() is not None or inner.text.upper() in ("SEQ", "NOT"):
                    raise self.error(f"NOT takes one event type and an optional variable (NOT N, NOT Cancel "
                                     f"X), found {inner.describe()}", inner.span)
                var = self.primary()
                assert isinstance(var, Var)
                return Not(var, self.span(tok.start, var.span.end))
            type_tok = var_tok = self.advance()
            if self.peek().kind is Kind.IDENT and self.clause_at() is None:
                var_tok = self.advance()
            return Var(type_tok.text, var_tok.text, self.span(type_tok.start, var_tok.end))
        message = f"expected an event type, SEQ(...) or '(' in the pattern, found {tok.describe()}"
        raise self.error(message, tok.span)

    def seq(self) -> Seq:
        seq_tok = self.advance()
        self.advance()  # "("
        if self.peek().is_punct(")"):
            close = self.advance()
            message = "empty SEQ(): name at least one sub-pattern, e.g. SEQ(A, B)"
            raise self.error(message, self.span(seq_tok.start, close.end))
        items = [self.alternation()]
        while self.peek().is_punct(","):
            self.advance()
            items.append(self.alternation())
        close = self.expect(")", "expected ',' or ')' in SEQ(...)")
        return Seq(tuple(items), self.span(seq_tok.start, close.end))

    def bind_variables(self, pattern: Pattern, pattern_span: Span) -> None:
        """Record the variables; a name used twice is an error with a rewritten pattern as a hint."""
        variables = pattern_variables(pattern) + tuple(n.var for n in negations(pattern))
        for var in variables:
            first = self.variables.setdefault(var.name, var)
            if first is var:
                continue
            uses = [v for v in variables if v.name == var.name]
            hint = self.text[pattern_span.start : pattern_span.end]
            for number, use in reversed(list(enumerate(uses, 1))):
                local = use.span.start - pattern_span.start, use.span.end - pattern_span.start
                hint = f"{hint[: local[0]]}{use.event_type} {use.name}{number}{hint[local[1] :]}"
            types = f", as {first.event_type} and as {var.event_type}"
            if first.event_type == var.event_type:
                types = ""
            raise self.error(
                f"variable {var.name} appears twice in the pattern{types}; "
                f"bind the type to distinct variables, e.g. {hint}",
                var.span,
            )

    def check_variable(self, name: str, span: Span) -> None:
        if name in self.variables:
            return
        bound = [v.name for v in self.variables.values() if v.event_type == name]
        if bound:
            message = f"{name} is an event type, not a variable: the pattern binds it to {_join(bound)}"
        else:
            message = f"unknown variable {name} (the pattern binds {_join(list(self.variables))})"
        raise self.error(message, span)

    # -- SEMANTICS ------------------------------------------------------------

    def semantics_clause(self) -> Semantics:
        """A word such as ``skip-till-any-match``: words and hyphens written without spaces."""
        first = self.peek()
        parts = [self.name(f"a semantics ({_join(list(_SEMANTICS))})")]
        while self.peek().start == parts[-1].end and (
            self.peek().kind is Kind.IDENT or self.peek().is_punct("-")
        ):
            parts.append(self.advance())
        written = "".join(t.text for t in parts)
        try:
            return _SEMANTICS[written.lower()]
        except KeyError:
            raise self.error(
                f"unknown semantics {written} (expected {_join(list(_SEMANTICS))})",
                self.span(first.start, parts[-1].end),
            ) from None

    # -- WHERE ----------------------------------------------------------------

    def where_clause(self) -> tuple[Conjunct, ...]:
        parts, ands, ors = self.split_conjuncts()
        if not parts[0] and not ands:
            raise self.error("empty WHERE: name at least one condition", self.peek().span)
        for k, part in enumerate(parts):
            if not part:
                raise self.error(
                    "expected a condition before AND" if k == 0 else "expected a condition after AND",
                    ands[max(k - 1, 0)].span,
                )
        if len(parts) > 1 and ors:
            raise self.error(
                "OR next to a top-level AND is ambiguous here (WHERE is split into conjuncts at AND); "
                "put the OR in parentheses",
                ors[0].span,
            )
        return tuple(self.equivalence(p) if p[0].is_punct("[") else self.condition(p) for p in parts)

    def split_conjuncts(self) -> tuple[list[list[Token]], list[Token], list[Token]]:
        """Tokens of each top-level conjunct, the separating ANDs, and the top-level ORs.

        An AND inside brackets, CASE ... END, or completing ``BETWEEN x AND y``
        does not separate conjuncts.
        """
        parts: list[list[Token]] = [[]]
        ands: list[Token] = []
        ors: list[Token] = []
        depth = between = case = 0
        while True:
            tok = self.peek()
            if tok.kind is Kind.EOF or (depth == 0 and self.clause_at() is not None):
                break
            word = self.word(self.pos) if depth == 0 and not self.names_variable(self.pos) else None
            if tok.is_punct("(["):
                depth += 1
            elif tok.is_punct(")]"):
                depth -= 1
            elif word == "CASE":
                case += 1
            elif word == "END" and case:
                case -= 1
            elif word == "BETWEEN" and not case:
                between += 1
            elif word == "AND" and not case and between:
                between -= 1
            elif word == "AND" and not case:
                ands.append(self.advance())
                parts.append([])
                continue
            elif word == "OR" and not case:
                ors.append(tok)
            parts[-1].append(self.advance())
        return parts, ands, ors

    def names_variable(self, i: int) -> bool:
        """Token ``i`` is a word in a variable's place -- before ``.`` or inside
        ``NEXT(...)`` -- so not a keyword, whatever it spells (``Case.v``, ``NEXT(And)``)."""
        if self.at(i).kind is not Kind.IDENT or (i > 0 and self.at(i - 1).is_punct(".")):
            return False
        if self.at(i + 1).is_punct("."):
            return True
        return (i >= 2 and self.at(i - 1).is_punct("(") and self.at(i + 1).is_punct(")")
                and self.at(i - 2).kind is Kind.IDENT and self.at(i - 2).text.upper() == NEXT_MARKER)

    def equivalence(self, part: list[Token]) -> Equivalence:
        span = self.span(part[0].start, part[-1].end)
        inner = part[1:-1]
        shape = [t.kind is Kind.IDENT if k % 2 == 0 else t.is_punct(".") for k, t in enumerate(inner)]
        if not part[-1].is_punct("]") or len(inner) not in (1, 3) or not all(shape):
            raise self.error("an equivalence predicate is [attr] or [V.attr], on its own between ANDs", span)
        if len(inner) == 1:
            attr = AttrRef(None, inner[0].text, inner[0].span)
        else:
            attr = AttrRef(inner[0].text, inner[2].text, self.span(inner[0].start, inner[2].end))
            self.check_variable(inner[0].text, inner[0].span)
        return Equivalence(attr, span)

    def condition(self, part: list[Token]) -> Condition:
        start, end = part[0].start, part[-1].end
        span = self.span(start, end)
        for k, tok in enumerate(part):
            if tok.is_punct(";"):
                raise self.error("unexpected ';' in WHERE", tok.span)
            after_dot = k > 0 and part[k - 1].is_punct(".")
            if tok.kind is Kind.IDENT and tok.text.upper() == "SELECT" and not (
                    after_dot or self.names_variable(self.tokens.index(tok))):
                raise self.error("subqueries are not allowed in WHERE", tok.span)
        if len(part) > MAX_CONDITION_TOKENS:
            raise self.error(f"this condition has {len(part)} tokens, more than the "
                             f"{MAX_CONDITION_TOKENS} cogra reads in one condition; "
                             "a long OR of equalities is an IN list", span)
        text = self.text[start:end]
        masked, names = _mask_variables(part, start, text)
        try:
            tree = sqlglot.parse_one(masked)
        except sqlglot.errors.ParseError as exc:
            raise self.sqlglot_error(exc, start, masked, names) from None
        except sqlglot.errors.SqlglotError:  # e.g. a token sqlglot cannot read
            raise self.error("cannot read this condition", span) from None
        _unmask(tree, names)
        return _ConditionChecker(self, start, span).build(tree, text)

    def sqlglot_error(self, exc: sqlglot.errors.ParseError, offset: int, text: str,
                      names: dict[str, str]) -> QueryError:
        """Turn sqlglot's error (line/column inside the conjunct, whose ``text`` has the
        variables ``names`` masked) into one about the whole query."""
        info = exc.errors[0] if exc.errors else {}
        highlight = info.get("highlight") or ""
        description = info.get("description") or str(exc)
        for placeholder, name in names.items():
            description = re.sub(rf"\b{placeholder}\b", name, description)
        span = self.span(offset, offset + len(text))
        line, col = info.get("line"), info.get("col")
        if highlight and line and col:
            line_start = sum(len(s) + 1 for s in text.split("\n")[: line - 1])
            local_end = line_start + col
            local_start = local_end - len(highlight)
            if text[local_start:local_end] == highlight:
                span = self.span(offset + local_start, offset + local_end)
                highlight = self.text[span.start : span.end]
        if description.startswith("Required keyword"):
            message = f"incomplete condition near {highlight!r}: an operand is missing"
        elif description.startswith("Invalid expression / Unexpected token"):
            message = f"unexpected {highlight!r} in the condition"
        elif description.startswith("Expecting )"):
            message = f"expected ')' near {highlight!r}"
        else:
            message = f"cannot parse the condition near {highlight!r}: {description}"
        return self.error(message, span)

    # -- GROUP-BY and WITHIN --------------------------------------------------

    def group_by_clause(self) -> tuple[AttrRef, ...]:
        attrs = [self.attr_ref("an attribute after GROUP-BY")]
        while self.peek().is_punct(","):
            self.advance()
            attrs.append(self.attr_ref("an attribute after ','"))
        seen: dict[tuple[str | None, str], AttrRef] = {}
        for attr in attrs:
            if attr.variable is not None:
                self.check_variable(attr.variable, self.variable_span(attr))
            if seen.setdefault(_attr_key(attr), attr) is not attr:
                raise self.error(f"duplicate GROUP-BY attribute {attr.text}", attr.span)
        return tuple(attrs)

    def window_clause(self, keyword: Token) -> Window:
        within = self.duration("WITHIN")
        slide = None
        if self.clause_at() == ("SLIDE", 1):
            self.advance()
            slide = self.duration("SLIDE")
            if slide.seconds > within.seconds:
                raise self.error(
                    f"SLIDE {_written(slide)} is larger than WITHIN {_written(within)}; "
                    "events between windows would be lost",
                    slide.span,
                )
        last = slide or within
        return Window(within, slide, self.span(keyword.start, last.span.end))

    def duration(self, keyword: str) -> Duration:
        tok = self.peek()
        if tok.is_punct("-") and self.peek(1).kind is Kind.NUMBER:
            raise self.error(f"{keyword} needs a positive duration", self.span(tok.start, self.peek(1).end))
        if tok.kind is not Kind.NUMBER:
            example = f"{keyword} 10 minutes"
            message = f"expected a duration after {keyword} (e.g. {example}), found {tok.describe()}"
            raise self.error(message, tok.span)
        number = self.advance()
        unit = self.peek()
        if unit.kind is not Kind.IDENT or self.clause_at() is not None:
            raise self.error(f"missing time unit after {number.text}; valid units: {_unit_list()}", unit.span)
        if unit.text.lower() not in UNIT_SECONDS:
            raise self.error(f"unknown time unit {unit.text}; valid units: {_unit_list()}", unit.span)
        self.advance()
        span = self.span(number.start, unit.end)
        amount = Fraction(number.text)
        if amount == 0:
            raise self.error(f"{keyword} needs a positive duration, not {number.text} {unit.text}", span)
        if amount * UNIT_SECONDS[unit.text.lower()] * 1_000_000 > MAX_MICROSECONDS:
            raise self.error(f"{keyword} {number.text} {unit.text} is longer than the longest window "
                             "cogra supports (2^63 - 1 microseconds, about 292,000 years)", span)
        return Duration(amount, unit.text, span)

    # -- checks across clauses ------------------------------------------------

    def check_returns(
        self, returns: tuple[ReturnItem, ...], group_by: tuple[AttrRef, ...], window: Window | None
    ) -> None:
        """RETURN attributes must be GROUP-BY attributes; output column names must be distinct."""
        grouped = {_attr_key(a): a for a in group_by}
        for item in returns:
            value = item.value
            if isinstance(value, AttrRef) and _attr_key(value) not in grouped:
                near = [a.text for a in group_by if a.name.lower() == value.name.lower()]
                hint = f" (GROUP-BY has {near[0]}: write it the same way)" if near else ""
                raise self.error(
                    f"{value.text} in RETURN is not a GROUP-BY attribute{hint}; "
                    f"add it to GROUP-BY or aggregate it",
                    value.span,
                )
        names: dict[str, int] = {}
        if window is not None:
            names.update((c, 0) for c in _WINDOW_COLUMNS)
        for number, item in enumerate(returns, 1):
            other = names.setdefault(item.name.lower(), number)
            if other == number:
                continue
            clash = f"RETURN item {other}" if other else "the window column WITHIN adds"
            raise self.error(
                f"duplicate output column {item.name} (same as {clash}); rename one with AS", item.span
            )


class _ConditionChecker:
    """Validate one sqlglot condition tree, rewrite ``NEXT(V).attr`` and collect its columns.

    sqlglot positions are offsets into the conjunct's text; ``offset`` maps them
    back into the whole query.
    """

    _FORBIDDEN: tuple[tuple[type[exp.Expression], str], ...] = (
        (exp.AggFunc, "aggregate function {sql} is not allowed in WHERE; aggregates belong in RETURN"),
        (exp.Star, "'*' is not allowed in WHERE"),
        (exp.Alias, "unexpected {alias} in the condition"),
        (exp.Window, "window functions are not allowed in WHERE"),
    )

    def __init__(self, parser: _Parser, offset: int, span: Span):
        self.parser = parser
        self.offset = offset
        self.conjunct_span = span

    def node_span(self, node: exp.Expression) -> Span:
        """The stretch covered by the positioned parts (identifiers, literals, function names) of ``node``."""
        metas = [n.meta for n in node.walk() if "start" in n.meta]
        if not metas:
            return self.conjunct_span
        start = self.offset + min(m["start"] for m in metas)
        return self.parser.span(start, self.offset + max(m["end"] for m in metas) + 1)

    def fail(self, message: str, node: exp.Expression) -> QueryError:
        return self.parser.error(message, self.node_span(node))

    def build(self, tree: exp.Expression, text: str) -> Condition:
        for node in tree.walk(bfs=False):
            for kind, message in self._FORBIDDEN:
                if isinstance(node, kind):
                    alias = node.args.get("alias") if isinstance(node, exp.Alias) else None
                    message = message.format(sql=node.sql(), alias=repr(alias.name) if alias else "")
                    raise self.fail(message, alias or node)
            if isinstance(node, exp.Column) and (node.args.get("db") or node.args.get("catalog")):
                raise self.fail(f"{node.sql()} {_NOT_AN_ATTRIBUTE}", node)
            if isinstance(node, exp.In) and not node.expressions:
                raise self.fail(f"{condition_sql(node)}: IN needs at least one value", node)
        self.rewrite_next(tree)
        for dot in tree.find_all(exp.Dot):
            raise self.fail(f"{condition_sql(dot)} {_NOT_AN_ATTRIBUTE}", dot)
        return Condition(tree, text, self.conjunct_span, self.references(tree))

    def rewrite_next(self, tree: exp.Expression) -> None:
        """``Dot(NEXT(V), attr)`` -> ``Column(attr, table=V, db=NEXT)`` (see ``NEXT_MARKER``)."""
        for call in list(tree.find_all(exp.Anonymous)):
            if call.name.upper() != NEXT_MARKER:
                continue
            dot = call.parent
            args = call.expressions
            if len(args) != 1 or not isinstance(args[0], exp.Column) or args[0].table:
                raise self.fail("NEXT takes one variable: write NEXT(V).attr", call)
            variable = args[0].this
            has_attribute = isinstance(dot, exp.Dot) and isinstance(dot.expression, exp.Identifier)
            if not has_attribute or dot.this is not call:
                raise self.fail(f"{call.sql()} needs an attribute: write {call.sql()}.attr", call)
            self.parser.check_variable(variable.name, self.node_span(variable))
            marker = exp.to_identifier(NEXT_MARKER)
            marker.meta.update(call.meta)  # so the column's span starts at "NEXT"
            dot.replace(exp.Column(this=dot.expression, table=variable, db=marker))

    def references(self, tree: exp.Expression) -> tuple[ColumnRef, ...]:
        """Every column in text order; the first unknown variable (in text order) is an error."""
        columns = sorted(tree.find_all(exp.Column), key=lambda c: self.node_span(c).start)
        refs = []
        for column in columns:
            is_next = column.args.get("db") is not None
            variable = column.table or None
            if variable is not None and not is_next:
                self.parser.check_variable(variable, self.node_span(column.args["table"]))
            refs.append(ColumnRef(variable, column.name, is_next, self.node_span(column)))
        return tuple(refs)


def _mask_variables(part: list[Token], offset: int, text: str) -> tuple[str, dict[str, str]]:
    """The conjunct's text with every variable name -- a word before ``.`` or the argument
    of ``NEXT(...)`` -- replaced by a placeholder of the same length, and the placeholders'
    names.

    A variable may be named like an SQL keyword (``Call``, a type of the report's q2;
    ``Set``, ``If``, ``Case``), which sqlglot would read as a statement or an expression
    (``Call.v > 1`` as a ``CALL`` command).  Placeholders keep every offset, so sqlglot's
    positions still point into the query text.  Why not quote the names instead: quotes
    shift the offsets of everything after them.
    """
    chars = list(text)
    words = set(re.findall(r"\w+", text))
    names: dict[str, str] = {}
    placeholders: dict[str, str] = {}
    for k, tok in enumerate(part):
        if tok.kind is not Kind.IDENT or len(tok.text) < 2 or (k > 0 and part[k - 1].is_punct(".")):
            continue
        before_dot = k + 1 < len(part) and part[k + 1].is_punct(".")
        in_next = (k >= 2 and part[k - 1].is_punct("(") and part[k - 2].kind is Kind.IDENT
                   and part[k - 2].text.upper() == NEXT_MARKER
                   and k + 1 < len(part) and part[k + 1].is_punct(")"))
        if not (before_dot or in_next):
            continue
        placeholder = placeholders.get(tok.text)
        if placeholder is None:
            placeholder = _placeholder(len(tok.text), words)
            if placeholder is None:
                continue
            words.add(placeholder)
            placeholders[tok.text] = placeholder
            names[placeholder] = tok.text
        chars[tok.start - offset : tok.end - offset] = placeholder
    return "".join(chars), names


def _placeholder(length: int, taken: set[str]) -> str | None:
    """An identifier of ``length`` characters, ``_`` and digits, that is not in ``taken``."""
    for number in range(10 ** (length - 1)):
        candidate = "_" + str(number).zfill(length - 1)
        if candidate not in taken:
            return candidate
    return None


def _unmask(tree: exp.Expression, names: dict[str, str]) -> None:
    """Give the masked identifiers of ``tree`` their variables' names back."""
    if not names:
        return
    for ident in tree.find_all(exp.Identifier):
        name = names.get(ident.this)
        if name is not None:
            ident.set("this", name)


MAX_MICROSECONDS = 2**63 - 1
"""Window sizes and slides are int64 microseconds for timestamps (and int64 for numbers)."""


def _attr_key(attr: AttrRef) -> tuple[str | None, str]:
    return attr.variable, attr.name.lower()


def _written(duration: Duration) -> str:
    return f"{duration.amount} {duration.unit}"


# ---------------------------------------------------------------------------
# dump: a stable text rendering for golden tests
# ---------------------------------------------------------------------------


def condition_sql(expression: exp.Expression) -> str:
    """SQL text of a WHERE condition with NEXT columns written back as ``NEXT(V).attr``."""

    def restore(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and node.text("db") == NEXT_MARKER:
            call = exp.Anonymous(this=NEXT_MARKER, expressions=[exp.Column(this=node.args["table"].copy())])
            return exp.Dot(this=call, expression=node.this.copy())
        return node

    return expression.transform(restore).sql()


def dump(query: Query) -> str:
    """An indented, stable rendering of the whole tree; spans as ``@line:column``."""
    lines = ["query"]
    out = lines.append
    out("  returns")
    for item in query.returns:
        alias = f" as {item.alias!r}" if item.alias is not None else ""
        out(f"    item {item.text!r}{alias} {_at(item.span)}")
        kind = "aggregate" if isinstance(item.value, Aggregate) else "attr"
        out(f"      {kind} {item.value.text} {_at(item.value.span)}")
    out("  pattern")
    _dump_pattern(query.pattern, "    ", out)
    out(f"  semantics {query.semantics.value}")
    out("  where" if query.where else "  where none")
    for conjunct in query.where:
        if isinstance(conjunct, Equivalence):
            out(f"    equivalence [{conjunct.attribute.text}] {_at(conjunct.span)}")
            continue
        out(f"    condition {_at(conjunct.span)}")
        out(f"      sql {condition_sql(conjunct.expression)}")
        for ref in conjunct.references:
            out(f"      ref {_ref_text(ref)} {_at(ref.span)}")
    out("  group_by" if query.group_by else "  group_by none")
    for attr in query.group_by:
        out(f"    attr {attr.text} {_at(attr.span)}")
    window = query.window
    if window is None:
        out("  window none")
    else:
        out(f"  window {_at(window.span)}")
        for name, duration in (("within", window.within), ("slide", window.slide)):
            if duration is not None:
                out(f"    {name} {_written(duration)} = {duration.seconds} s {_at(duration.span)}")
    return "\n".join(lines) + "\n"


def clause_texts(text: str) -> dict[str, str]:
    """Each clause's text as written, whitespace collapsed, by clause name (``RETURN``,
    ``PATTERN``, ``SEMANTICS``, ``WHERE``, ``GROUP-BY``, ``WITHIN``; SLIDE belongs to
    WITHIN): what an error about a changed clause shows.  ``text`` must parse."""
    parser = _Parser(text)
    starts: list[tuple[str, int, int]] = []  # (name, token index, tokens in the keyword)
    for i, tok in enumerate(parser.tokens):
        clause = parser.clause_at(i)
        if clause is not None and clause[0] != "SLIDE":
            starts.append((clause[0], i, clause[1]))
    texts = {}
    for k, (name, i, width) in enumerate(starts):
        stop = starts[k + 1][1] if k + 1 < len(starts) else len(parser.tokens) - 1  # the EOF token
        first, end = parser.at(i + width).start, parser.at(stop - 1).end
        texts[name] = " ".join(text[first:end].split()) if stop > i + width else ""
    return texts


def _at(span: Span) -> str:
    return f"@{span.line}:{span.column}"


def _ref_text(ref: ColumnRef) -> str:
    if ref.is_next:
        return f"NEXT({ref.variable}).{ref.attribute}"
    return f"{ref.variable}.{ref.attribute}" if ref.variable else ref.attribute


def _dump_pattern(node: Pattern, indent: str, out: Callable[[str], None]) -> None:
    if isinstance(node, Not):
        out(f"{indent}not {_at(node.span)}")
        _dump_pattern(node.var, indent + "  ", out)
        return
    if isinstance(node, Var):
        out(f"{indent}var {node.name}: {node.event_type} {_at(node.span)}")
        return
    if isinstance(node, Seq):
        children = node.items
    elif isinstance(node, Alt):
        children = node.options
    else:
        children = (node.inner,)
    bounds = f" {node.suffix}" if isinstance(node, Repeat) else ""
    out(f"{indent}{type(node).__name__.lower()}{bounds} {_at(node.span)}")
    for child in children:
        _dump_pattern(child, indent + "  ", out)
