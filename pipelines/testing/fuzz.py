"""Properties of the hand-written parsers under random input (Hypothesis), shared by the tests (a few hundred
examples each, ``tests/core/test_fuzz.py``) and the long run (``benchmarks/bench_fuzz.py``):

* **LETOR lines** (:func:`udfs.letor_parse.parse_block`, the numba kernel over bytes): every line of a block is
  exactly one of a row, a blank line, a comment or a bad line; a bad line is reported with its own line number,
  the reason and the token :func:`~udfs.letor_parse.parse_line_reference` gives; an accepted line holds the
  reference's label, qid and float32 bits; a line written from known values (:func:`letor_rows`) reads back as
  exactly those values; nothing else is raised.
* **Training paths** (:func:`pipelines.plan.paths.parse_path`): a text either parses, and its shorthand parses to
  the same path, or raises :class:`~pipelines.plan.paths.PathError` with one line.
* **The config loader** (``--set`` overrides and config files, as the CLI loads them): either a config whose
  dictionary serialises, or a :class:`~pipelines.core.errors.UserError` of one line (the CLI: exit 2, one line).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import typing
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from udfs.letor_parse import LineError, LineSpec, parse_block, parse_line_reference

SPEC = LineSpec(n_features=6, min_label=0, max_label=4)


# ------------------------------------------------------------ LETOR lines
_ALPHABET = b"0123456789 \t:.-+eE#qidnaxfINF\r\x0b\x0c\x00\xff"
_PIECES = [b"qid:", b"1:", b"6:", b"7:", b"0:", b"1e39", b"nan", b"inf", b"-0", b".5", b"#", b" ", b"\t", b"\r",
           b"123456789012345678901", b"1e-50", b"0x1", b"4", b"5", b"-1"]  # fmt: skip


@st.composite
def letor_rows(draw: Any) -> tuple[bytes, tuple[int, int, dict[int, np.float32]]]:
    """A valid line written from known values: (the line, (label, qid, {feature: float32 value}))."""
    label = draw(st.integers(SPEC.min_label, SPEC.max_label))
    qid = draw(st.integers(0, 2**31 - 1))
    idx = sorted(draw(st.sets(st.integers(1, SPEC.n_features), max_size=SPEC.n_features)))
    values = {}
    for i in idx:
        v = np.float32(draw(st.floats(width=32, allow_nan=False, allow_infinity=False)))
        values[i] = v
    ws = draw(st.sampled_from([" ", "\t", "  ", " \t"]))
    fmt = draw(st.sampled_from(["repr", "g9", "e"]))
    texts = [repr(float(v)) if fmt == "repr" else f"{float(v):.9g}" if fmt == "g9" else f"{float(v):.8e}"
             for v in values.values()]  # fmt: skip
    parts = [str(label), f"qid:{qid}", *(f"{i}:{t}" for i, t in zip(values, texts, strict=True))]
    tail = draw(st.sampled_from(["", " #docid = 7", "\r", " "]))
    return (ws.join(parts) + tail).encode(), (label, qid, values)


@st.composite
def mutated(draw: Any, line: st.SearchStrategy[bytes]) -> bytes:
    """``line`` with a few bytes inserted, deleted or replaced (from the grammar's own bytes and others)."""
    b = bytearray(draw(line))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "piece"]))
        at = draw(st.integers(0, len(b)))
        if op == "delete" and b:
            del b[min(at, len(b) - 1)]
        elif op == "piece":
            b[at:at] = draw(st.sampled_from(_PIECES))
        else:
            c = draw(st.sampled_from(list(_ALPHABET)))
            if op == "insert" or not b:
                b.insert(at, c)
            else:
                b[min(at, len(b) - 1)] = c
    return bytes(b).replace(b"\n", b" ")


def letor_lines() -> st.SearchStrategy[list[bytes]]:
    """Blocks of lines: valid, mutated valid, and random bytes of the grammar's alphabet (no newline inside)."""
    valid = letor_rows().map(lambda r: r[0])
    noise = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" "))
    grammar = st.lists(st.sampled_from(list(_ALPHABET)), max_size=40).map(bytes)
    return st.lists(st.one_of(valid, mutated(valid), noise, grammar), min_size=1, max_size=30)


def check_letor_block(lines: list[bytes]) -> dict[str, int]:
    """The LETOR property on one block (see the module); returns the counts of rows, skipped and bad lines."""
    buf = np.frombuffer(b"\n".join(lines) + b"\n", dtype=np.uint8)
    block = parse_block(buf, SPEC)
    assert block.n_lines == len(lines), (block.n_lines, len(lines))
    rows = {int(ln): r for r, ln in enumerate(block.row_line)}
    bad = {int(ln): (int(c), t) for ln, c, t in zip(block.bad_line, block.bad_code, block.bad_token, strict=True)}
    assert not set(rows) & set(bad), "a line both accepted and quarantined"
    skipped = 0
    for i, line in enumerate(lines):
        try:
            ref = parse_line_reference(line, SPEC)
        except LineError as e:
            assert bad.get(i) == (e.code, e.token), (i, line, bad.get(i), (e.code, e.token))
            continue
        if ref is None:
            skipped += 1
            assert i not in rows and i not in bad, (i, line)
            continue
        assert i in rows, (i, line, bad.get(i))
        r = rows[i]
        want = np.full(SPEC.n_features, SPEC.fill, np.float32)
        for k, v in ref[2].items():
            want[k - 1] = v
        assert (int(block.label[r]), int(block.qid[r])) == (ref[0], ref[1]), (i, line)
        got = np.ascontiguousarray(block.X[r], dtype=np.float32)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (i, line, got, want)
    assert skipped == block.n_blank + block.n_comment
    assert len(rows) + len(bad) + skipped == len(lines)
    return {"rows": len(rows), "skipped": skipped, "bad": len(bad)}


def check_letor_roundtrip(row: tuple[bytes, tuple[int, int, dict[int, np.float32]]]) -> None:
    """A line written from known values reads back as exactly those values (float32 bits)."""
    line, (label, qid, values) = row
    block = parse_block(np.frombuffer(line + b"\n", dtype=np.uint8), SPEC)
    assert block.n_rows == 1 and block.n_bad == 0, (line, block.bad_code, block.bad_token)
    assert (int(block.label[0]), int(block.qid[0])) == (label, qid)
    want = np.full(SPEC.n_features, SPEC.fill, np.float32)
    for k, v in values.items():
        want[k - 1] = v
    got = np.ascontiguousarray(block.X[0], dtype=np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (line, got, want)


# ------------------------------------------------------------ training paths
def path_texts() -> st.SearchStrategy[str]:
    """Texts near the path syntax: objective names, curricula, seeds, separators, digits (some not ASCII)."""
    from udfs.objectives import registry

    words = [*registry.objectives(), "stochastic_ndcg", "q_nrel", "random", "paced", "mse2", "Lambdamart", ""]
    token = st.one_of(
        st.sampled_from(words),
        st.sampled_from(
            [
                "@",
                "~",
                ":",
                ",",
                ".",
                "*",
                " ",
                "\t",
                "\n",
                "0",
                "1",
                "40",
                "-1",
                "99999999999999999999",
                "٣",
                "²",
                "_",
                "@q_nrel",
                "@paced.*",
                "~2",
                ":0",
                ":60",
                ".0",
                ".x",
            ]
        ),  # fmt: skip
        st.text(max_size=6),
    )
    noise = st.lists(token, max_size=14).map("".join)
    segment = st.builds(
        lambda o, d, s, t: f"{o}{d}{s}:{t}",
        st.sampled_from(words[:-1]),
        st.sampled_from(["", "@q_nrel", "@q_nrel.0", "@paced.*", "@random.1", "@x.y", "@"]),
        st.sampled_from(["", "~1", "~0", "~12", "~"]),
        st.sampled_from(["1", "40", "0", "007", "", "x"]),
    )
    structured = st.lists(segment, min_size=1, max_size=4).map(",".join)
    return st.one_of(structured, noise, st.builds(lambda a, b: a + b, structured, noise))


def check_path(text: str) -> bool:
    """The path property on one text; True if it parsed."""
    from pipelines.plan.paths import PathError, parse_path

    try:
        p = parse_path(text)
    except PathError as e:
        assert "\n" not in str(e), str(e)
        return False
    assert parse_path(p.shorthand()) == p, (text, p.shorthand())
    return True


# ------------------------------------------------------------ the config loader
def config_keys() -> dict[str, Any]:
    """Every dotted key of the config (``train.eta``, ``components``...) and its type."""
    from pipelines.core.config import Config

    out: dict[str, Any] = {}

    def walk(tp: Any, prefix: str) -> None:
        hints = typing.get_type_hints(tp)
        for f in dataclasses.fields(tp):
            t = hints[f.name]
            if isinstance(t, type) and dataclasses.is_dataclass(t):
                walk(t, f"{prefix}{f.name}.")
            else:
                out[prefix + f.name] = t

    walk(Config, "")
    return out


#: Values as one would type them after ``--set key=``: numbers, words, YAML's specials, lists, maps, aliases.
_ATOMS = ["0", "1", "-1", "0.5", "1e400", ".nan", ".inf", "-.inf", "true", "no", "null", "~", "''", "x", "4g", "[",
          "]", "{", "}", "[1, 2]", "{a: 1}", "&a [*a]", "*b", "!!python/tuple", "'", '"', ":", "- 1", "#", "@", "`",
          "%", "\t", "99999999999999999999", "lambdamart:5", "[q_nrel]", "{x: {y: .nan}}", "&a {x: *a}"]  # fmt: skip
#: What a setting of each kind is most often given wrong: the right kind of value at its edges, and the wrong kind.
_BY_TYPE = {
    float: ["0", "-1", "0.05", ".nan", ".inf", "-.inf", "1e400", "x", "[1]", "true"],
    int: ["0", "-1", "3", "99999999999999999999", "1.5", ".nan", "x", "[]", "true"],
    bool: ["true", "false", "yes", "1", "x", "null"],
    str: ["''", "x", "1", "null", "[x]", "{a: b}", "http://u:p@h:1"],
}


def yaml_values() -> st.SearchStrategy[str]:
    """Any value text (:data:`_ATOMS` joined, or free text)."""
    return st.one_of(
        st.sampled_from(_ATOMS),
        st.lists(st.one_of(st.sampled_from(_ATOMS), st.text(max_size=5)), max_size=5).map(" ".join),
        st.text(max_size=20),
    )


def overrides() -> st.SearchStrategy[list[str]]:
    """One to three ``--set`` overrides: a known key with a value of its kind's edge cases or any value, a key
    that does not exist, or any text."""
    keys = config_keys()
    typed = [(k, _BY_TYPE.get(t, ["[]", "{}", "&a [*a]", "{x: .nan}", "&a {x: *a}", "x"])) for k, t in keys.items()]
    known = st.sampled_from(typed).flatmap(lambda kv: st.sampled_from(kv[1]).map(lambda v: f"{kv[0]}={v}"))
    anything = st.builds(lambda k, v: f"{k}={v}", st.one_of(st.sampled_from(list(keys)), st.text(max_size=8)),
                         yaml_values())  # fmt: skip
    return st.lists(st.one_of(known, anything, st.text(max_size=20)), min_size=1, max_size=3)


def check_overrides(sets: list[str]) -> bool:
    """The config property on ``--set`` overrides; True if they loaded."""
    from pipelines.core.errors import UserError
    from pipelines.plugins.run_config import load_run_config

    try:
        cfg = load_run_config(None, sets, check=False)
    except UserError as e:
        assert "\n" not in str(e), str(e)
        return False
    json.dumps(cfg.to_dict(), allow_nan=False)
    return True


def config_files() -> st.SearchStrategy[str]:
    """Config files: a section and key from the config's own with a value of its kind's edge cases or any value,
    and sometimes broken YAML after it."""
    keys = config_keys()

    def doc(kv: tuple[str, str], junk: str) -> str:
        k, v = kv
        section, _, rest = k.partition(".")
        body = f"{section}:\n  {rest}: {v}\n" if rest else f"{section}: {v}\n"
        return body + junk

    typed = st.sampled_from(list(keys.items())).flatmap(
        lambda kt: st.sampled_from(_BY_TYPE.get(kt[1], ["[]", "&a [*a]", "{x: .nan}"])).map(lambda v: (kt[0], v))
    )
    any_value = st.tuples(st.sampled_from(list(keys)), yaml_values())
    junk = st.sampled_from(["", "", "\n: x\n", "\t- y\n", "a: [\n", "plugins: [x.py]\n", "---\n---\n"])
    return st.builds(doc, st.one_of(typed, any_value), junk)


def check_config_file(text: str) -> bool:
    """The config property on a config file's text; True if it loaded."""
    from pipelines.core.errors import UserError
    from pipelines.plugins.run_config import load_run_config

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "conf.yaml"
        p.write_text(text)
        try:
            cfg = load_run_config(p, check=False)
        except UserError as e:
            assert "\n" not in str(e), str(e)
            return False
    json.dumps(cfg.to_dict(), allow_nan=False)
    return True


# ------------------------------------------------------------ the plug-in boundary
#: What an objective's gradient or hessian may come back as (numpy as ``np``; ``m``, ``y``, ``o``: its margins,
#: labels and offsets): the right thing, and each way of getting it wrong.
_ARRAYS = [
    "np.ones_like(m)", "(m - y).astype(np.float32)", "(m - y).astype(np.float64)", "np.ones(len(m) + 1, np.float32)",
    "np.ones(len(o) - 1, np.float32)", "-np.ones_like(m)", "np.full_like(m, np.nan)", "np.full_like(m, np.inf)",
    "np.zeros_like(m)", "1.0", "0", "None", "[1.0] * len(m)", "list(m)", "'x'", "m.astype(complex)",
    "np.ones((len(m), 1), np.float32)", "m.astype(np.int32)", "np.ones_like(m).astype(object)", "m",
    "(x for x in m)", "{'g': m}", "np.float32(1)", "np.ones_like(m)[::2]", "np.array([])", "True",
]  # fmt: skip
#: What a difficulty score may come back as (``labels``, ``features``, ``offsets`` its arguments).
_SCORES = [
    "np.diff(offsets).astype(float)", "np.diff(offsets)", "np.add.reduceat(labels, offsets[:-1])", "labels",
    "np.ones(len(offsets))", "np.full(len(offsets) - 1, np.nan)", "np.full(len(offsets) - 1, -np.inf)", "None",
    "1.0", "[1.0] * (len(offsets) - 1)", "'x'", "np.diff(offsets).astype(complex)", "np.array([])",
    "np.diff(offsets).astype(object)", "np.diff(offsets).reshape(-1, 1)", "{'a': 1}", "np.diff(offsets) > 2",
    "features['f1'][offsets[:-1]]", "features['f9999']", "features",
]  # fmt: skip
#: What a pacing function may come back as (``stage``, ``stages``).
_SHARES = ["stage / stages", "1.0", "0.0", "-0.5", "2.0", "float('nan')", "None", "'half'", "[0.5]", "1 / stage",
           "stage", "np.float32(0.5)", "True", "complex(0.5, 0)", "1.0 - stage / stages"]  # fmt: skip
#: Exceptions a plug-in may raise, and what else it may do to its inputs first (not KeyboardInterrupt: it is Ctrl-C
#: wherever it is raised, and ltr stops as it does for Ctrl-C, exit 130).
_RAISES = ["ValueError('bad')", "KeyError('f1')", "ZeroDivisionError()", "RuntimeError()", "SystemExit(3)",
           "MemoryError()", "RecursionError()", "Exception('x\\ny')", "TypeError(None)", "StopIteration()",
           "GeneratorExit()", "AssertionError()", "OSError(28, 'No space left on device')"]  # fmt: skip
_SIDE = ["", "", "", "m -= 1", "y[:] = 0", "o[0] = 1", "labels[0] = 9", "offsets[-1] = 0",
         "features['f1'][0] = 1"]  # fmt: skip
#: How a component may be declared: good and bad names, params= and features=.
_NAMES = ["mine", "mine2", "Mine", "my-score", "", "1x", "lambdamart", "n_rel", "q_nrel", "random", "linear",
          "anti_mine", "x" * 80, "mine ", "none"]  # fmt: skip
_PARAMS = ["", "", "params={'a': 1.0}", "params={'a': float('nan')}", "params=3", "params={'seed': 'x'}",
           "params={1: 2}", "params={'a': [1, 2]}", "params={'a': {'b': 1}}", "params=None"]  # fmt: skip
_FEATURES = ["", "", "features=['f1']", "features=['f9999']", "features=['g1']", "features='f1'", "features=[]",
             "features=['f0']", "features=[1]", "features=None", "features=['f1', 'f1']"]  # fmt: skip
_KINDS = ["", "", "kind='label_free'", "kind='oracle'", "kind='model'", "kind='dynamic'", "kind=3"]
#: A component's ``check=`` of its settings: none, one that passes, refuses (ValueError), fails otherwise (any
#: exception of its code), takes no argument, or is not a function.
_CHECKS = ["", "", "check=lambda p: None", "check=lambda p: 1 / 0", "check=lambda: None", "check=3",
           "check=lambda p: (_ for _ in ()).throw(ValueError('a > 0'))", "check=lambda p: p['nope']"]  # fmt: skip


@st.composite
def plugin_sources(draw: Any) -> str:
    """The text of a plug-in file: one component of a drawn kind, declared with a drawn name, ``params=`` and
    ``check=`` (and for a score ``features=`` and ``kind=``), whose function returns a drawn value, raises a drawn
    exception or writes into its inputs first; sometimes two components of one name."""
    kind = draw(st.sampled_from(["objective", "difficulty", "pacing"]))
    name = draw(st.sampled_from(_NAMES))
    opts = [draw(st.sampled_from(_PARAMS)), draw(st.sampled_from(_CHECKS))]
    if kind == "difficulty":
        opts += [draw(st.sampled_from(_FEATURES)), draw(st.sampled_from(_KINDS))]
    decl = ", ".join([repr(name), *[o for o in opts if o]])
    raises = draw(st.one_of(st.none(), st.none(), st.sampled_from(_RAISES)))
    side = draw(st.sampled_from(_SIDE))
    if kind == "objective":
        sig, ret = "m, y, o, *, tree, params", f"{draw(st.sampled_from(_ARRAYS))}, {draw(st.sampled_from(_ARRAYS))}"
        side = side if side[:1] in ("", "m", "y", "o") else ""
    elif kind == "difficulty":
        sig, ret = "labels, features, offsets, *, params", draw(st.sampled_from(_SCORES))
        side = side if side[:1] in ("", "l", "o", "f") and not side.startswith("o[") else ""
    else:
        sig, ret, side = "stage, stages, *, params", draw(st.sampled_from(_SHARES)), ""
    body = (f"    {side}\n" if side else "") + (f"    raise {raises}\n" if raises else f"    return {ret}\n")
    text = f"@{kind}({decl})\ndef f({sig}):\n{body}"
    if draw(st.integers(0, 9)) == 0:  # the same name registered twice in one file
        text += f"\n\n@{kind}({decl})\ndef g({sig}):\n{body}"
    return "import numpy as np\nfrom pipelines.plugins import difficulty, objective, pacing\n\n\n" + text


def check_plugin(text: str) -> bool:
    """The plug-in property: ``ltr plugins --check --plugin FILE`` on the file ``text`` exits 0 (the component
    loads and passes its checks) or 2 with one line naming the file, never a traceback or another code; True if
    it passed. Each call loads the file under a name of its own and unloads every plug-in afterwards."""
    import contextlib
    import io
    import uuid

    from pipelines.app.cli import main
    from pipelines.plugins import loading
    from udfs import components

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"fuzz_{uuid.uuid4().hex[:12]}.py"
        path.write_text(text)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = main(["plugins", "--check", "--plugin", str(path)])
        finally:
            for src in list(loading._OWNER.values()):  # noqa: SLF001
                loading.unload(src.module)
            components.configure({})
        # nothing of a plug-in that failed to load stays registered (a fixed file loaded again would clash with it)
        assert not loading.plugin_components(), f"left registered: {sorted(loading.plugin_components())}"
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        assert rc in (0, 2), f"exit {rc}: {err.getvalue()[-2000:]}"
        if rc == 2:
            assert len(lines) == 1, f"{len(lines)} lines: {err.getvalue()[-2000:]}"
            assert str(path) in lines[0] or path.stem in lines[0], lines[0]
    return rc == 0
