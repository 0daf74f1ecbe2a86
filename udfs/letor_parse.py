"""LETOR / SVMlight-with-qid text parsing: a numba kernel and its pure-Python twin.

Grammar of one line (MSLR.md)::

    <label> qid:<qid> <index>:<value> ... [# comment]

* ``label``: an integer in ``[min_label, max_label]``.
* ``qid``: a non-negative integer below 2**31.
* features: ``index:value`` with 1-based, strictly increasing indices up to
  ``n_features``; missing indices (sparse rows) are 0, or NaN (missing, for
  XGBoost) where :attr:`LineSpec.absent` is ``"missing"``. Values are decimal
  numbers (``[+-]digits[.digits][e[+-]digits]``); NaN and infinities are
  rejected, as are values outside the float32 range unless
  :attr:`LineSpec.overflow` is ``"clamp"`` (Istella writes ``1.79769313486e+308``,
  double's largest value, as a sentinel: clamped to float32's largest, which keeps
  its order among the values, so trees split on it as on the original, and counted).
* White space is space, tab, CR, VT, FF (so CRLF files parse). A line that is
  empty or white space is *blank*; one whose first non-blank character is ``#``
  is a *comment*; ``#`` after the features starts a trailing comment
  (LETOR 4.0's ``#docid = ...``).

Why our own parser: Spark's ``libsvm`` source rejects ``qid:`` and comments,
a ``split``/``cast`` parse is several times slower (see
``benchmarks/bench_ingest.py``), and neither reports *which* token of *which*
line is wrong. The numba kernel runs at memory-scan speed inside Spark tasks.

Numbers are converted with Clinger's exact fast path (mantissa < 2**53 and a
power of ten up to 22): the result is the correctly rounded double, then
rounded to float32, exactly what ``np.float32(float(token))`` gives. Tokens
outside the fast path (more than 18 digits, huge exponents) are
re-parsed with Python's ``float`` by :func:`parse_line_reference`, so every
value matches the reference parser bit for bit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numba
import numpy as np

from udfs.compile_once import CompiledOnce

# ---------------------------------------------------------------- error codes
E_LABEL_SYNTAX = 1
E_LABEL_RANGE = 2
E_QID_MISSING = 3
E_QID_SYNTAX = 4
E_FEATURE_SYNTAX = 5
E_INDEX_SYNTAX = 6
E_INDEX_RANGE = 7
E_INDEX_ORDER = 8
E_VALUE_SYNTAX = 9
E_VALUE_NONFINITE = 10
E_VALUE_OVERFLOW = 11

#: Reason text per error code; ``{lo}``, ``{hi}``, ``{n}`` are filled from the spec.
REASONS: dict[int, str] = {
    E_LABEL_SYNTAX: "label is not an integer",
    E_LABEL_RANGE: "label out of range [{lo}, {hi}]",
    E_QID_MISSING: "missing qid:<id> token after the label",
    E_QID_SYNTAX: "qid is not an integer in [0, 2147483647]",
    E_FEATURE_SYNTAX: "feature token is not index:value",
    E_INDEX_SYNTAX: "feature index is not an integer",
    E_INDEX_RANGE: "feature index out of range [1, {n}]",
    E_INDEX_ORDER: "feature index repeated or decreasing",
    E_VALUE_SYNTAX: "feature value is not a number",
    E_VALUE_NONFINITE: "feature value is NaN or infinite",
    E_VALUE_OVERFLOW: "feature value overflows float32",
}

#: Short machine names of the reasons (manifest keys).
REASON_KEYS: dict[int, str] = {
    E_LABEL_SYNTAX: "label_syntax",
    E_LABEL_RANGE: "label_range",
    E_QID_MISSING: "qid_missing",
    E_QID_SYNTAX: "qid_syntax",
    E_FEATURE_SYNTAX: "feature_syntax",
    E_INDEX_SYNTAX: "index_syntax",
    E_INDEX_RANGE: "index_range",
    E_INDEX_ORDER: "index_order",
    E_VALUE_SYNTAX: "value_syntax",
    E_VALUE_NONFINITE: "value_nonfinite",
    E_VALUE_OVERFLOW: "value_overflow",
}

QID_MAX = 2**31 - 1
FLOAT32_MAX = float(np.finfo(np.float32).max)

# counters returned by the kernel (indices into its ``counts`` array)
C_LINES, C_ROWS, C_BAD, C_BLANK, C_COMMENT, C_SLOW = range(6)


#: What an absent feature index of a sparse line becomes (:attr:`LineSpec.absent`).
ABSENT = ("zero", "missing")
#: What a value beyond float32's range does (:attr:`LineSpec.overflow`).
OVERFLOW = ("reject", "clamp")


@dataclass(frozen=True)
class LineSpec:
    """What a valid line looks like: feature count and label range; what absent features become
    (``absent``: ``"zero"`` or ``"missing"``, NaN) and what a value beyond float32 does (``overflow``:
    ``"reject"``, the line is quarantined, or ``"clamp"`` to +-FLT_MAX, counted)."""

    n_features: int
    min_label: int = 0
    max_label: int = 4
    absent: str = "zero"
    overflow: str = "reject"

    @property
    def fill(self) -> float:
        """The value of an absent feature."""
        return 0.0 if self.absent == "zero" else float("nan")

    def __post_init__(self) -> None:
        if self.absent not in ABSENT:
            raise ValueError(f"absent must be one of {', '.join(ABSENT)}, got {self.absent!r}")
        if self.overflow not in OVERFLOW:
            raise ValueError(f"overflow must be one of {', '.join(OVERFLOW)}, got {self.overflow!r}")
        if self.n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {self.n_features}")
        if self.min_label > self.max_label:
            raise ValueError(f"min_label {self.min_label} > max_label {self.max_label}")
        if self.min_label < -128 or self.max_label > 127:
            raise ValueError("labels are stored as int8: the range must lie in [-128, 127]")

    def reason(self, code: int) -> str:
        """Human reason for error ``code``, with this spec's bounds filled in."""
        return REASONS[code].format(lo=self.min_label, hi=self.max_label, n=self.n_features)


# ------------------------------------------------------------------ kernels
@numba.njit(cache=True, nogil=True, inline="always")
def _is_ws(c: int) -> bool:
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@numba.njit(cache=True, nogil=True, inline="always")
def _lower(c: int) -> int:
    return c + 32 if 65 <= c <= 90 else c


@numba.njit(cache=True, nogil=True)
def _is_nonfinite_word(buf, a, b) -> bool:
    """True if buf[a:b] is [+-](nan|inf|infinity), case-insensitive."""
    if a < b and (buf[a] == 43 or buf[a] == 45):
        a += 1
    n = b - a
    if n == 3:
        w0, w1, w2 = _lower(buf[a]), _lower(buf[a + 1]), _lower(buf[a + 2])
        if w0 == 110 and w1 == 97 and w2 == 110:  # nan
            return True
        if w0 == 105 and w1 == 110 and w2 == 102:  # inf
            return True
    if n == 8:
        word = (105, 110, 102, 105, 110, 105, 116, 121)  # infinity
        for k in range(8):
            if _lower(buf[a + k]) != word[k]:
                return False
        return True
    return False


_POW10 = np.array([10.0**k for k in range(23)])


@numba.njit(cache=True, nogil=True, inline="always")
def _is_term(c) -> bool:
    """Token terminator: white space, newline or '#'."""
    return c == 32 or c == 10 or c == 9 or c == 13 or c == 35 or c == 11 or c == 12


@numba.njit(cache=True, nogil=True)
def _token_end(buf, i) -> int:
    while not _is_term(buf[i]):
        i += 1
    return i


@numba.njit(cache=True, nogil=True)
def _value_error(buf, a, i):
    """Error path of the value parser: (code, token end) for the bad value starting at ``a``."""
    end = _token_end(buf, i)
    if _is_nonfinite_word(buf, a, end):
        return E_VALUE_NONFINITE, end
    return E_VALUE_SYNTAX, end


@numba.njit(cache=True, nogil=True, inline="always")
def _line_qid(buf, ls, le) -> int:
    """qid of the line buf[ls:le], or -1 if it has none (blank, comment, or no valid qid token).

    Only the label token is skipped (not validated): a line with a bad label
    but a good qid still belongs to its query for chunk alignment.
    """
    i = ls
    while i < le and _is_ws(buf[i]):
        i += 1
    if i >= le or buf[i] == 35:
        return -1
    while i < le and not _is_ws(buf[i]) and buf[i] != 35:
        i += 1
    while i < le and _is_ws(buf[i]):
        i += 1
    if le - i < 5 or buf[i] != 113 or buf[i + 1] != 105 or buf[i + 2] != 100 or buf[i + 3] != 58:
        return -1
    i += 4
    q = 0
    nd = 0
    while i < le and 48 <= buf[i] <= 57:
        q = q * 10 + (buf[i] - 48)
        nd += 1
        if nd > 10:
            return -1
        i += 1
    if nd == 0 or q > 2147483647:
        return -1
    if i < le and not _is_ws(buf[i]) and buf[i] != 35:
        return -1
    return q


@numba.njit(cache=True, nogil=True, inline="always")
def _next_line_end(buf, i, n) -> int:
    while i < n and buf[i] != 10:
        i += 1
    return i


@numba.njit(cache=True, nogil=True)
def scan_line_qids(buf, line_qid) -> int:
    """Write the qid of every line of ``buf`` (-1 for lines without one); return the line count."""
    n = buf.size
    pos = 0
    line = 0
    while pos < n:
        le = _next_line_end(buf, pos, n)
        line_qid[line] = _line_qid(buf, pos, le)
        line += 1
        pos = le + 1
    return line


@numba.njit(cache=True, nogil=True)
def parse_lines(
    buf,
    n_features,
    min_label,
    max_label,
    strict,
    pow10,
    XT,
    qids,
    labels,
    row_line,
    line_qid,
    bad_line,
    bad_code,
    bad_t0,
    bad_t1,
    bad_l0,
    bad_l1,
    bad_slow,
    slow_row,
    counts,
    fill=0.0,
):
    """Parse every line of ``buf`` (uint8, must end with a newline) in one pass.

    Good rows go to ``XT`` (feature-major: ``XT[feature, row]``, so that each
    feature column is contiguous for Arrow), ``qids``, ``labels`` and
    ``row_line``; output arrays hold one slot per line and ``XT`` must be zeroed. Bad lines are recorded (line
    index, error code, token and line byte ranges) and their partial row is
    cleared; ``bad_slow`` marks bad lines with an earlier token left to the exact
    slow path (whose own error, if any, comes first in the line).
    ``line_qid`` gets every line's qid as :func:`_line_qid` defines it.
    With ``strict`` parsing stops after the first bad line. ``counts``
    receives the counters ``C_*``.
    """
    n = buf.size
    i = 0
    line = 0
    row = 0
    nbad = 0
    nblank = 0
    ncomment = 0
    nslow = 0
    while i < n:
        ls = i
        cur = line
        line += 1
        c = buf[i]
        while c == 32 or c == 9 or c == 13 or c == 11 or c == 12:
            i += 1
            c = buf[i]
        if c == 10:
            nblank += 1
            i += 1
            continue
        if c == 35:
            ncomment += 1
            i = _next_line_end(buf, i, n) + 1
            continue
        code = 0
        q = -1
        # ---- label: [+-]digits{1,4}
        t0 = i
        lneg = False
        if c == 45 or c == 43:
            lneg = c == 45
            i += 1
        lab = 0
        nd = 0
        d = np.int64(buf[i]) - 48
        while 0 <= d <= 9:
            lab = lab * 10 + d
            nd += 1
            i += 1
            d = np.int64(buf[i]) - 48
        if nd == 0 or nd > 4 or not _is_term(buf[i]):
            code = E_LABEL_SYNTAX
            i = _token_end(buf, i)
        else:
            if lneg:
                lab = -lab
            if lab < min_label or lab > max_label:
                code = E_LABEL_RANGE
        t1 = i
        # ---- qid:digits{1,10}
        if code == 0:
            c = buf[i]
            while c == 32 or c == 9 or c == 13 or c == 11 or c == 12:
                i += 1
                c = buf[i]
            t0 = i
            if not (buf[i] == 113 and buf[i + 1] == 105 and buf[i + 2] == 100 and buf[i + 3] == 58):
                code = E_QID_MISSING
                i = _token_end(buf, i)
            else:
                i += 4
                q = 0
                nd = 0
                d = np.int64(buf[i]) - 48
                while 0 <= d <= 9:
                    q = q * 10 + d
                    nd += 1
                    i += 1
                    d = np.int64(buf[i]) - 48
                if nd == 0 or nd > 10 or q > 2147483647 or not _is_term(buf[i]):
                    code = E_QID_SYNTAX
                    q = -1
                    i = _token_end(buf, i)
            t1 = i
        # ---- features: index:value ...
        prev = 0
        slow = False
        while code == 0:
            c = buf[i]
            while c == 32 or c == 9 or c == 13 or c == 11 or c == 12:
                i += 1
                c = buf[i]
            if c == 10 or c == 35:
                break
            t0 = i
            idx = 0
            nd = 0
            d = np.int64(c) - 48
            while 0 <= d <= 9:
                idx = idx * 10 + d
                nd += 1
                i += 1
                d = np.int64(buf[i]) - 48
            if buf[i] != 58:  # no ':' right after the digits
                t1 = _token_end(buf, i)
                code = E_FEATURE_SYNTAX
                for k in range(t0, t1):
                    if buf[k] == 58:
                        code = E_INDEX_SYNTAX
                break
            if nd == 0 or nd > 9:
                code = E_INDEX_SYNTAX
            elif idx < 1 or idx > n_features:
                code = E_INDEX_RANGE
            elif idx <= prev:
                code = E_INDEX_ORDER
            if code != 0:
                t1 = _token_end(buf, i)
                break
            prev = idx
            # ---- value: [+-]digits[.digits][(e|E)[+-]digits], parsed in place.
            # (Kept inline on purpose: a numba helper taking ``buf`` costs an
            # atomic refcount pair per call, which halved the throughput.)
            i += 1
            a = i
            neg = False
            c = buf[i]
            if c == 43 or c == 45:
                neg = c == 45
                i += 1
            m = 0
            e = 0
            j = i
            while buf[i] >= 48 and buf[i] <= 57:
                m = m * 10 + (buf[i] - 48)
                i += 1
            ndigits = i - j
            if buf[i] == 46:  # '.'
                i += 1
                j = i
                while buf[i] >= 48 and buf[i] <= 57:
                    m = m * 10 + (buf[i] - 48)
                    i += 1
                e = j - i
                ndigits += i - j
            ok = ndigits > 0
            if ok and (buf[i] == 101 or buf[i] == 69):  # exponent
                i += 1
                eneg = False
                if buf[i] == 43 or buf[i] == 45:
                    eneg = buf[i] == 45
                    i += 1
                ok = buf[i] >= 48 and buf[i] <= 57
                x = 0
                while buf[i] >= 48 and buf[i] <= 57:
                    if x < 100000:
                        x = x * 10 + (buf[i] - 48)
                    i += 1
                e += -x if eneg else x
            c = buf[i]
            if not ok or not (c == 32 or c == 10 or c == 9 or c == 13 or c == 35 or c == 11 or c == 12):
                code, i = _value_error(buf, a, i)
                t1 = i
                break
            t1 = i
            if ndigits > 18 or m > 9007199254740992 or e > 22 or e < -22:
                # Possibly inexact in float64 arithmetic (more than 18 digits may
                # also have overflowed m): exact slow path, unless the value is 0.
                if m != 0 or ndigits > 18:
                    slow = True
                else:
                    XT[idx - 1, row] = -0.0 if neg else 0.0
                continue
            v = m / pow10[-e] if e < 0 else m * pow10[e]
            if v > 3.4028234663852886e38:
                # float32 rounds values below FLT_MAX + half an ulp down to
                # FLT_MAX; the exact path decides that boundary.
                if v >= 3.4028235677973366e38:
                    code = E_VALUE_OVERFLOW
                    break
                slow = True
                continue
            XT[idx - 1, row] = -v if neg else v
        le = _next_line_end(buf, i, n)
        if code == 0:
            line_qid[cur] = q
            qids[row] = q
            labels[row] = lab
            row_line[row] = cur
            if slow:
                slow_row[nslow] = row
                nslow += 1
            row += 1
        else:
            line_qid[cur] = q if q >= 0 else _line_qid(buf, ls, le)
            for k in range(n_features):
                XT[k, row] = fill
            bad_line[nbad] = cur
            bad_code[nbad] = code
            bad_t0[nbad] = t0
            bad_t1[nbad] = t1
            bad_l0[nbad] = ls
            bad_l1[nbad] = le
            bad_slow[nbad] = slow
            nbad += 1
            if strict:
                i = le + 1
                break
        i = le + 1
    counts[C_LINES] = line
    counts[C_ROWS] = row
    counts[C_BAD] = nbad
    counts[C_BLANK] = nblank
    counts[C_COMMENT] = ncomment
    counts[C_SLOW] = nslow
    return row


@numba.njit(cache=True, nogil=True)
def _row_hashes_sum(qids, labels, docs, bitsT) -> np.uint64:
    n = qids.size
    f = bitsT.shape[0]
    prime = np.uint64(1099511628211)
    h = np.full(n, np.uint64(14695981039346656037))
    for r in range(n):
        x = (h[r] ^ np.uint64(np.int64(qids[r]) & 0xFFFFFFFF)) * prime
        x = (x ^ np.uint64(np.int64(labels[r]) & 0xFF)) * prime
        h[r] = (x ^ np.uint64(np.int64(docs[r]) & 0xFFFFFFFF)) * prime
    for k in range(f):
        for r in range(n):
            h[r] = (h[r] ^ np.uint64(bitsT[k, r])) * prime
    total = np.uint64(0)
    for r in range(n):
        x = h[r]
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
        total += x
    return total


def row_hashes_sum(qids: np.ndarray, labels: np.ndarray, docs: np.ndarray, X: np.ndarray) -> int:
    """Order-independent content hash: sum (mod 2**64) of a 64-bit hash of every row.

    Each row's hash mixes its qid, label, doc and the bit patterns of its
    features (FNV-1a over 32-bit words, then the splitmix64 finaliser), so the
    sum does not depend on how rows are split into chunks or files, but changes
    when any value, or the order of documents in a query, changes.
    ``X`` is ``[rows, n_features]`` float32 in any memory order.
    """
    bitsT = np.asarray(X, dtype=np.float32).T.view(np.uint32)
    return int(_ROW_HASHES_SUM(qids, labels, docs, bitsT))


# ------------------------------------------------------- reference parser
_WS_RE = re.compile(rb"[ \t\r\x0b\x0c]+")
_INT_RE = re.compile(rb"[+-]?[0-9]{1,4}")
_QID_RE = re.compile(rb"qid:([0-9]{1,10})")
_NUM_RE = re.compile(rb"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NONFINITE_RE = re.compile(rb"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)


class LineError(ValueError):
    """A line that does not follow the grammar: ``code`` and the offending ``token``."""

    def __init__(self, code: int, token: bytes) -> None:
        super().__init__(code, token)
        self.code = code
        self.token = token


def parse_line_reference(
    line: bytes, spec: LineSpec, clamped: list[int] | None = None
) -> tuple[int, int, dict[int, np.float32]] | None:
    """Parse one line (without its newline) the slow, obvious way.

    Returns ``None`` for blank and comment lines, ``(label, qid, {index: value})``
    for data lines, and raises :class:`LineError` for bad ones. It is the
    oracle the kernel is tested against, and the kernel's slow path for the
    rare tokens outside its exact fast path. Values clamped (``spec.overflow ==
    "clamp"``) are counted in ``clamped[0]`` when a list is given.
    """
    body = line.split(b"#", 1)[0]
    stripped = line.strip(b" \t\r\x0b\x0c")
    if not stripped:
        return None
    if stripped.startswith(b"#"):
        return None
    tokens = [t for t in _WS_RE.split(body) if t]
    label_tok = tokens[0]
    if not _INT_RE.fullmatch(label_tok):
        raise LineError(E_LABEL_SYNTAX, label_tok)
    label = int(label_tok)
    if not spec.min_label <= label <= spec.max_label:
        raise LineError(E_LABEL_RANGE, label_tok)
    if len(tokens) < 2 or not tokens[1].startswith(b"qid:"):
        raise LineError(E_QID_MISSING, tokens[1] if len(tokens) > 1 else b"")
    m = _QID_RE.fullmatch(tokens[1])
    if not m or int(m.group(1)) > QID_MAX:
        raise LineError(E_QID_SYNTAX, tokens[1])
    qid = int(m.group(1))
    values: dict[int, np.float32] = {}
    prev = 0
    for tok in tokens[2:]:
        if b":" not in tok:
            raise LineError(E_FEATURE_SYNTAX, tok)
        idx_s, val_s = tok.split(b":", 1)
        if not idx_s or len(idx_s) > 9 or not idx_s.isdigit():
            raise LineError(E_INDEX_SYNTAX, tok)
        idx = int(idx_s)
        if not 1 <= idx <= spec.n_features:
            raise LineError(E_INDEX_RANGE, tok)
        if idx <= prev:
            raise LineError(E_INDEX_ORDER, tok)
        prev = idx
        if not _NUM_RE.fullmatch(val_s):
            code = E_VALUE_NONFINITE if _NONFINITE_RE.fullmatch(val_s) else E_VALUE_SYNTAX
            raise LineError(code, tok)
        with np.errstate(over="ignore"):
            v = np.float32(float(val_s))
        if not np.isfinite(v):
            if spec.overflow != "clamp":
                raise LineError(E_VALUE_OVERFLOW, tok)
            v = np.float32(-FLOAT32_MAX if val_s.startswith(b"-") else FLOAT32_MAX)
            if clamped is not None:
                clamped[0] += 1
        values[idx] = v
    return label, qid, values


# -------------------------------------------------------- block parsing
@dataclass
class ParsedBlock:
    """Result of parsing a byte block of whole lines.

    Row arrays are in source order. ``bad_*`` describe quarantined lines with
    0-based line indices relative to the block start.
    """

    X: np.ndarray  # float32 [rows, n_features], column-major (each feature contiguous)
    qid: np.ndarray  # int32 [rows]
    label: np.ndarray  # int8 [rows]
    row_line: np.ndarray  # int64 [rows], 0-based line index in the block
    line_qid: np.ndarray  # int64 [lines], -1 where a line has no valid qid
    n_lines: int
    n_blank: int
    n_comment: int
    bad_line: np.ndarray  # int64
    bad_code: np.ndarray  # int8
    bad_token: list[bytes]
    bad_raw: list[bytes]
    n_clamped: int = 0  # values beyond float32 clamped (LineSpec.overflow == "clamp")

    @property
    def n_rows(self) -> int:
        """Number of rows parsed (lines kept)."""
        return int(self.qid.size)

    @property
    def n_bad(self) -> int:
        """Number of quarantined lines."""
        return int(self.bad_line.size)


@numba.njit(cache=True, nogil=True)
def _count_newlines(buf) -> int:
    n = 0
    for c in buf:
        n += c == 10
    return n


#: The kernels called from Python, each compiled once per machine, not once per Python worker that reaches it first
#: (:mod:`udfs.compile_once`): an ingest's first tasks reach them together.
_PARSE_LINES = CompiledOnce(parse_lines)
_COUNT_NEWLINES = CompiledOnce(_count_newlines)
_ROW_HASHES_SUM = CompiledOnce(_row_hashes_sum)


def count_lines(buf: np.ndarray) -> int:
    """Number of lines in ``buf``: newlines, plus one for a last line without one."""
    if buf.size == 0:
        return 0
    return int(_COUNT_NEWLINES(buf)) + (0 if buf[-1] == 10 else 1)


def parse_block(buf: np.ndarray, spec: LineSpec, strict: bool = False) -> ParsedBlock:
    """Parse a block of whole lines (uint8 array) into rows plus quarantined lines.

    Every line ends up in exactly one of: rows, blank, comment, bad. With
    ``strict`` parsing stops after the first bad line (so the counts cover
    the lines up to and including it).
    """
    buf = np.ascontiguousarray(buf, dtype=np.uint8)
    if buf.size and buf[-1] != 10:
        buf = np.concatenate((buf, np.array([10], dtype=np.uint8)))  # the kernel needs a final newline
    cap = max(count_lines(buf), 1)
    XT = np.zeros((spec.n_features, cap), dtype=np.float32)
    if spec.absent != "zero":
        XT.fill(spec.fill)
    qids = np.zeros(cap, dtype=np.int32)
    labels = np.zeros(cap, dtype=np.int8)
    row_line = np.zeros(cap, dtype=np.int64)
    line_qid = np.full(cap, -1, dtype=np.int64)
    bad_line = np.zeros(cap, dtype=np.int64)
    bad_code = np.zeros(cap, dtype=np.int8)
    bad_t0 = np.zeros(cap, dtype=np.int64)
    bad_t1 = np.zeros(cap, dtype=np.int64)
    bad_l0 = np.zeros(cap, dtype=np.int64)
    bad_l1 = np.zeros(cap, dtype=np.int64)
    bad_slow = np.zeros(cap, dtype=np.bool_)
    slow_row = np.zeros(cap, dtype=np.int64)
    counts = np.zeros(6, dtype=np.int64)
    rows = _PARSE_LINES(
        buf,
        spec.n_features,
        spec.min_label,
        spec.max_label,
        strict,
        _POW10,
        XT,
        qids,
        labels,
        row_line,
        line_qid,
        bad_line,
        bad_code,
        bad_t0,
        bad_t1,
        bad_l0,
        bad_l1,
        bad_slow,
        slow_row,
        counts,
        spec.fill,
    )
    nbad = int(counts[C_BAD])
    n_lines = int(counts[C_LINES])
    bad = []
    for k in range(nbad):
        raw = bytes(buf[bad_l0[k] : bad_l1[k]])
        code, token = int(bad_code[k]), bytes(buf[bad_t0[k] : bad_t1[k]])
        if bad_slow[k]:  # an earlier token went to the slow path: its error comes first
            try:
                parse_line_reference(raw, spec)
            except LineError as err:
                code, token = err.code, err.token
        bad.append((int(bad_line[k]), code, token, raw))
    keep = np.ones(rows, dtype=bool)
    clamped = [0]
    n_slow = int(counts[C_SLOW])
    if n_slow:
        # Rare tokens outside the exact fast path: re-parse their lines in Python.
        starts, ends = _line_bounds(buf)
        for r in slow_row[:n_slow]:
            ln = int(row_line[r])
            raw = bytes(buf[starts[ln] : ends[ln]])
            try:
                parsed = parse_line_reference(raw, spec, clamped)
            except LineError as err:
                keep[r] = False
                bad.append((ln, err.code, err.token, raw))
                continue
            if parsed is None:  # pragma: no cover - the kernel saw a data line
                raise RuntimeError(f"line {ln}: kernel and reference parser disagree")
            XT[:, r] = spec.fill
            for idx, v in parsed[2].items():
                XT[idx - 1, r] = v
    if keep.all():
        X, qids, labels, row_line = XT[:, :rows].T, qids[:rows], labels[:rows], row_line[:rows]
    else:
        bad.sort()
        if strict:
            # A slow-path error may precede the kernel's stop line; keep the first only.
            bad = bad[:1]
            keep &= row_line[:rows] < bad[0][0]
        sel = np.flatnonzero(keep)
        X, qids, labels, row_line = XT[:, sel].T, qids[sel], labels[sel], row_line[sel]
    return ParsedBlock(
        X=X,
        qid=qids,
        label=labels,
        row_line=row_line,
        line_qid=line_qid[:n_lines],
        n_lines=n_lines,
        n_blank=int(counts[C_BLANK]),
        n_comment=int(counts[C_COMMENT]),
        bad_line=np.array([b[0] for b in bad], dtype=np.int64),
        bad_code=np.array([b[1] for b in bad], dtype=np.int8),
        bad_token=[b[2] for b in bad],
        bad_raw=[b[3] for b in bad],
        n_clamped=clamped[0],
    )


def _line_bounds(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive, newline excluded) byte offsets of every line of ``buf``."""
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], nl + 1))
    ends = np.concatenate((nl, [buf.size]))
    if buf.size and buf[-1] == 10:
        starts, ends = starts[:-1], ends[:-1]
    return starts, ends
