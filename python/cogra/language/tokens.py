"""A small tokenizer for COGRA query text.

The clause structure (RETURN, PATTERN, ...) is not SQL, so we tokenize it
ourselves; WHERE conditions are handed to sqlglot as *text slices*, which is why
every token keeps its exact offsets.  Tokens are deliberately coarse: words,
numbers, quoted strings and single punctuation characters.  Multi-character
operators (``<=``, ``<>``) only ever occur inside WHERE, where sqlglot re-reads
the text, so they need no token of their own.

Quoting follows sqlglot's default dialect: ``'...'`` is a string, ``"..."`` and
```...``` are quoted identifiers; a quote character is escaped by doubling it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import Enum

from cogra.errors import QueryError
from cogra.language.limits import MAX_NESTING
from cogra.language.ast import Span


class Kind(Enum):
    IDENT = "identifier"
    NUMBER = "number"
    STRING = "string"
    QUOTED = "quoted identifier"
    PUNCT = "symbol"
    EOF = "end of query"


@dataclass(frozen=True)
class Token:
    kind: Kind
    text: str
    span: Span

    @property
    def start(self) -> int:
        return self.span.start

    @property
    def end(self) -> int:
        return self.span.end

    def is_punct(self, chars: str) -> bool:
        """True for a one-character symbol token that is one of ``chars``."""
        return self.kind is Kind.PUNCT and self.text in chars

    def describe(self) -> str:
        """How to name this token in an error message."""
        if self.kind is Kind.EOF:
            return "the end of the query"
        if self.kind is Kind.IDENT:
            return self.text
        return repr(self.text)


class Source:
    """The query text plus a line index, to turn offsets into line/column spans.

    Lines are split exactly as :class:`~cogra.errors.QueryError` splits them when it
    renders the caret line (``str.splitlines``), so the two always agree.
    """

    def __init__(self, text: str):
        self.text = text
        self._line_starts = [0]
        for line in text.splitlines(keepends=True):
            self._line_starts.append(self._line_starts[-1] + len(line))

    def span(self, start: int, end: int) -> Span:
        # The last entry is len(text): an offset at the very end belongs to the last line.
        line = min(bisect.bisect_right(self._line_starts, start), max(1, len(self._line_starts) - 1))
        return Span(start, end, line, start - self._line_starts[line - 1] + 1)


_QUOTES = {"'": Kind.STRING, '"': Kind.QUOTED, "`": Kind.QUOTED}
_DIGITS = "0123456789"


def tokenize(source: Source) -> list[Token]:
    """Split the query into tokens, ending with one EOF token placed after the last token."""
    text = source.text
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch.isalpha() or ch == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            kind = Kind.IDENT
        elif ch in _DIGITS:
            j = i + 1
            while j < n and text[j] in _DIGITS:
                j += 1
            if j + 1 < n and text[j] == "." and text[j + 1] in _DIGITS:
                j += 2
                while j < n and text[j] in _DIGITS:
                    j += 1
            kind = Kind.NUMBER
        elif ch in _QUOTES:
            j = _closing_quote(source, i)
            kind = _QUOTES[ch]
        else:
            j = i + 1
            kind = Kind.PUNCT
        tokens.append(Token(kind, text[i:j], source.span(i, j)))
        i = j
    eof_at = tokens[-1].end if tokens else 0
    tokens.append(Token(Kind.EOF, "", source.span(eof_at, eof_at)))
    return tokens


def _closing_quote(source: Source, start: int) -> int:
    """The offset just after the quote that closes the one at ``start`` (doubled quotes escape)."""
    text, quote = source.text, source.text[start]
    i = start + 1
    while True:
        i = text.find(quote, i)
        if i < 0:
            kind = "string" if quote == "'" else "quoted identifier"
            raise QueryError(f"unterminated {kind}: no closing {quote}", text, source.span(start, start + 1))
        if text.startswith(quote, i + 1):
            i += 2
            continue
        return i + 1


_CLOSERS = {"(": ")", "[": "]"}


def check_brackets(tokens: list[Token], source: Source) -> None:
    """Reject unbalanced ``()``/``[]`` up front, pointing at the bracket that has no partner.

    Doing this once for the whole query keeps every later stage free of
    "ran off the end" cases and gives a better caret than a parser that only
    notices the problem clauses later.
    """
    stack: list[Token] = []
    postfix = 0
    for tok in tokens:
        postfix = postfix + 1 if tok.is_punct("+*?") else 0
        if tok.is_punct("(["):
            stack.append(tok)
        if len(stack) + (postfix if postfix > 1 else 0) > MAX_NESTING:
            raise QueryError(f"the query nests more than {MAX_NESTING} levels deep here (brackets "
                             "open at once, or operators such as + in a row)", source.text, tok.span)
        elif tok.is_punct(")]"):
            if not stack:
                message = f"unmatched {tok.text!r}: there is no bracket to close"
                raise QueryError(message, source.text, tok.span)
            opener = stack.pop()
            if _CLOSERS[opener.text] != tok.text:
                raise QueryError(
                    f"{tok.text!r} does not close the {opener.text!r} at line {opener.span.line}, "
                    f"column {opener.span.column}",
                    source.text,
                    tok.span,
                )
    if stack:
        opener = stack[-1]
        raise QueryError(
            f"unclosed {opener.text!r}: no matching {_CLOSERS[opener.text]!r}", source.text, opener.span
        )
