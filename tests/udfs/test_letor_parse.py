"""The numba LETOR kernel against hand-written golden files and the pure-Python reference parser."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import golden
from udfs.letor_chunks import sorted_rows
from udfs.letor_parse import (
    E_INDEX_ORDER,
    E_LABEL_RANGE,
    E_VALUE_NONFINITE,
    E_VALUE_OVERFLOW,
    E_VALUE_SYNTAX,
    REASON_KEYS,
    LineError,
    LineSpec,
    count_lines,
    parse_block,
    parse_line_reference,
)

SPEC6 = LineSpec(n_features=6, min_label=0, max_label=4)


def _buf(text: str | bytes) -> np.ndarray:
    data = text.encode() if isinstance(text, str) else text
    return np.frombuffer(data, dtype=np.uint8)


def _rows(block) -> list:
    qid, label, doc, X = sorted_rows(block)
    rows = zip(qid, label, doc, strict=True)
    return [[int(q), int(lab), int(d), X[i].tolist()] for i, (q, lab, d) in enumerate(rows)]


@pytest.mark.parametrize("name", ["well_formed", "sparse_comments", "malformed"])
def test_kernel_matches_golden(name):
    path, exp = golden(name)
    block = parse_block(np.fromfile(path, dtype=np.uint8), SPEC6)
    assert (block.n_lines, block.n_blank, block.n_comment) == (exp["lines"], exp["blank"], exp["comments"])
    expected_rows = [[q, lab, d, np.float32(v).tolist()] for q, lab, d, v in exp["rows"]]
    assert _rows(block) == expected_rows
    got_q = [
        [int(ln) + 1, REASON_KEYS[int(c)], t.decode()]
        for ln, c, t in zip(block.bad_line, block.bad_code, block.bad_token, strict=True)
    ]
    assert got_q == exp["quarantine"]
    # good lines in == rows out
    assert block.n_rows == exp["lines"] - exp["blank"] - exp["comments"] - len(exp["quarantine"])


def test_reason_messages_are_pinned():
    spec = LineSpec(n_features=136, min_label=0, max_label=4)
    assert [spec.reason(c) for c in sorted(REASON_KEYS)] == [
        "label is not an integer",
        "label out of range [0, 4]",
        "missing qid:<id> token after the label",
        "qid is not an integer in [0, 2147483647]",
        "feature token is not index:value",
        "feature index is not an integer",
        "feature index out of range [1, 136]",
        "feature index repeated or decreasing",
        "feature value is not a number",
        "feature value is NaN or infinite",
        "feature value overflows float32",
    ]


@pytest.mark.parametrize(
    "token, expected",
    [
        ("1", 1.0),
        ("-0", -0.0),
        ("+0.0", 0.0),
        ("00012", 12.0),
        ("1E+2", 100.0),
        (".5", 0.5),
        ("5.", 5.0),
        ("-.5e-1", -0.05),
        ("0.000017", 1.7e-05),
        ("123456789", 123456789.0),
        ("3.4028235e38", 3.4028235e38),
        # outside the exact fast path: handled by the reference (Python float) path
        ("0.1234567890123456789", 0.1234567890123456789),
        ("123456789012345678901234567890", 1.2345679e29),
        ("1e-50", 0.0),
        ("1.5e30", 1.5e30),
    ],
)
def test_values_match_python_float(token, expected):
    block = parse_block(_buf(f"1 qid:1 1:{token}\n"), SPEC6)
    assert block.n_bad == 0
    got = block.X[0, 0]
    want = np.float32(float(token))
    assert np.float32(expected) == want  # the test's own arithmetic
    assert got.view(np.uint32) == want.view(np.uint32), token  # bit for bit, sign of zero included


@pytest.mark.parametrize(
    "token, code",
    [
        ("3.4028236e38", E_VALUE_OVERFLOW),
        ("1e39", E_VALUE_OVERFLOW),
        ("-1e400", E_VALUE_OVERFLOW),
        ("NaN", E_VALUE_NONFINITE),
        ("+Infinity", E_VALUE_NONFINITE),
        ("inf", E_VALUE_NONFINITE),
        ("1_000", E_VALUE_SYNTAX),
        ("1e", E_VALUE_SYNTAX),
        ("0x10", E_VALUE_SYNTAX),
        ("1.2.3", E_VALUE_SYNTAX),
        ("", E_VALUE_SYNTAX),
        ("-", E_VALUE_SYNTAX),
        ("nan1", E_VALUE_SYNTAX),
    ],
)
def test_bad_values(token, code):
    block = parse_block(_buf(f"1 qid:1 1:{token}\n0 qid:1 2:1\n"), SPEC6)
    assert block.n_rows == 1 and block.n_bad == 1
    assert int(block.bad_code[0]) == code
    assert block.bad_token[0] == f"1:{token}".encode()
    with pytest.raises(LineError) as err:
        parse_line_reference(f"1 qid:1 1:{token}".encode(), SPEC6)
    assert err.value.code == code


def test_no_final_newline_and_empty_input():
    assert count_lines(_buf("")) == 0
    assert count_lines(_buf("a\nb")) == 2
    assert count_lines(_buf("a\nb\n")) == 2
    block = parse_block(_buf("1 qid:1 1:2"), SPEC6)
    assert block.n_rows == 1 and block.X[0, 0] == 2.0
    empty = parse_block(_buf(""), SPEC6)
    assert (empty.n_rows, empty.n_lines, empty.n_bad) == (0, 0, 0)


def test_strict_stops_at_first_bad_line():
    text = "1 qid:1 1:1\n9 qid:1 1:1\n1 qid:1 1:x\n1 qid:1 1:1\n"
    block = parse_block(_buf(text), SPEC6, strict=True)
    assert block.n_bad == 1 and int(block.bad_line[0]) == 1 and int(block.bad_code[0]) == E_LABEL_RANGE
    lenient = parse_block(_buf(text), SPEC6)
    assert lenient.n_bad == 2 and lenient.n_rows == 2


def test_strict_with_slow_path_error_first():
    # line 2 overflows only on the exact (slow) path; line 3 is a kernel error
    text = "1 qid:1 1:1\n1 qid:1 1:1e400\n1 qid:1 2:1 2:1\n"
    block = parse_block(_buf(text), SPEC6, strict=True)
    assert [int(x) for x in block.bad_line] == [1]
    assert int(block.bad_code[0]) == E_VALUE_OVERFLOW
    assert block.n_rows == 1


def test_line_qid_of_bad_lines():
    block = parse_block(_buf("x qid:4 1:1\n1 qid:z 1:1\n1 qid:5 3:1 2:1\n# c\n\n"), SPEC6)
    assert block.line_qid.tolist() == [4, -1, 5, -1, -1]
    assert int(block.bad_code[2]) == E_INDEX_ORDER


# ------------------------------------------------------------------ fuzz
_TOKENS_GOOD = ["1:0.5", "2:3", "3:-1.25e2", "4:.5", "5:7.", "6:0", "1:1e-3", "2:+4"]
_TOKENS_BAD = [
    "junk",
    "x:1",
    "0:1",
    "7:1",
    "1:abc",
    "1:nan",
    "1:1e39",
    "1:",
    ":1",
    "1:1:1",
    "1:--1",
    "2:1e",
    "1:0x1",
    "1:Inf",
    "1:1e-400",
    "1:123456789012345678901",
]


def _random_line(rng: np.random.Generator) -> str:
    r = rng.random()
    if r < 0.04:
        return ""
    if r < 0.07:
        return "# comment " + str(rng.integers(100))
    label = str(rng.integers(0, 5)) if rng.random() > 0.05 else rng.choice(["-1", "5", "x", "1.0", "+2", "12345"])
    qid = (
        f"qid:{rng.integers(0, 50)}"
        if rng.random() > 0.05
        else rng.choice(["qid:", "qid:x", "q:1", "1:1", "qid:99999999999"])
    )
    idx = np.sort(rng.choice(np.arange(1, 7), size=rng.integers(0, 7), replace=False))
    feats = [f"{i}:{rng.choice(['0', '1', '-2.5', '0.125', '3e2', '1e-5', '.75', '12345678'])}" for i in idx]
    if rng.random() < 0.15:
        feats.insert(int(rng.integers(0, len(feats) + 1)), str(rng.choice(_TOKENS_BAD)))
    if rng.random() < 0.1 and feats:
        feats = feats[::-1]
    ws = rng.choice([" ", "\t", "  ", " \t "])
    line = ws.join([label, qid, *feats])
    if rng.random() < 0.1:
        line += " #docid = GX" + str(rng.integers(1000))
    if rng.random() < 0.1:
        line += "\r"
    return line


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_equals_reference_on_random_lines(seed):
    rng = np.random.default_rng(seed)
    lines = [_random_line(rng) for _ in range(2000)]
    block = parse_block(_buf("\n".join(lines) + "\n"), SPEC6)
    assert block.n_lines == len(lines)
    good = {int(ln): i for i, ln in enumerate(block.row_line)}
    bad = {int(ln): (int(c), t) for ln, c, t in zip(block.bad_line, block.bad_code, block.bad_token, strict=True)}
    n_skip = 0
    for i, line in enumerate(lines):
        try:
            ref = parse_line_reference(line.encode(), SPEC6)
        except LineError as e:
            assert i in bad, (i, line)
            assert bad[i] == (e.code, e.token), (i, line)
            continue
        if ref is None:
            n_skip += 1
            assert i not in good and i not in bad
            continue
        assert i in good, (i, line, bad.get(i))
        r = good[i]
        row = np.zeros(6, np.float32)
        for k, v in ref[2].items():
            row[k - 1] = v
        assert (int(block.label[r]), int(block.qid[r])) == (ref[0], ref[1])
        assert np.array_equal(np.ascontiguousarray(block.X[r]).view(np.uint32), row.view(np.uint32)), line
    assert n_skip == block.n_blank + block.n_comment
    assert len(good) + len(bad) + n_skip == len(lines)


def test_absent_features_are_zero_or_missing_as_the_spec_says():
    """Yahoo!'s sparse lines: an absent index is 0 by default and NaN with absent="missing"; a present 0 stays 0,
    also in the row after a bad line (whose half-filled slot is reset to the spec's fill, not to 0) and in a row
    that went through the slow path."""
    text = "2 qid:1 2:0.5 5:0\n1 qid:1 1:1 3:x\n0 qid:2 4:1e-30 6:0.25\n"
    zero, miss = SPEC6, LineSpec(n_features=6, absent="missing")
    for spec, f in ((zero, 0.0), (miss, np.nan)):
        block = parse_block(_buf(text), spec)
        assert block.n_rows == 2 and block.n_bad == 1
        np.testing.assert_array_equal(block.X[0], np.float32([f, 0.5, f, f, 0.0, f]))
        np.testing.assert_array_equal(block.X[1], np.float32([f, f, f, 1e-30, f, 0.25]))
    with pytest.raises(ValueError, match="absent must be one of zero, missing"):
        LineSpec(n_features=6, absent="nan")


def test_values_beyond_float32_are_rejected_or_clamped_and_counted():
    """Istella writes double's largest value as a sentinel: quarantined by default, clamped to float32's largest
    (sign kept, so its order among the values holds) and counted with overflow="clamp"."""
    big = "1.79769313486e+308"
    text = f"1 qid:1 1:{big} 2:-{big} 3:7\n0 qid:1 1:2\n"
    rejected = parse_block(_buf(text), SPEC6)
    assert (rejected.n_rows, rejected.n_bad, int(rejected.bad_code[0])) == (1, 1, E_VALUE_OVERFLOW)
    clamp = LineSpec(n_features=6, overflow="clamp")
    block = parse_block(_buf(text), clamp)
    assert (block.n_rows, block.n_bad, block.n_clamped) == (2, 0, 2)
    fmax = np.finfo(np.float32).max
    np.testing.assert_array_equal(block.X[0][:3], np.float32([fmax, -fmax, 7]))
    clamped = [0]
    assert parse_line_reference(f"1 qid:1 1:{big}".encode(), clamp, clamped) == (1, 1, {1: np.float32(fmax)})
    assert clamped == [1]
