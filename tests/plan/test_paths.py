"""Training paths: shorthand, resolution against curricula, and the prefix-sharing plan."""

from __future__ import annotations

import re

import pytest

from pipelines.plan.paths import PathError, Segment, parse_path, resolve
from pipelines.plan.trie import build_plan


def test_parse_and_shorthand():
    p = parse_path("mse:200, lambdamart:300")
    assert p.segments == (Segment("mse", 200), Segment("lambdamart", 300))
    assert p.trees == 500 and p.boundaries() == [0, 200] and p.shorthand() == "mse:200,lambdamart:300"
    c = parse_path("lambdamart@q_bm25:200,lambdamart:300")
    assert c.segments[0].data == "q_bm25.0" and c.segments[0].curriculum == "q_bm25" and c.segments[0].stage == 0
    assert parse_path("xgb_mse:5").segments[0].builtin == "reg:squarederror"
    s = parse_path("lambdamart@random:4,noisy_lambdamart~2:6")  # a grid.seeds repetition's seed offset
    assert s.segments[1] == Segment("noisy_lambdamart", 6, "all", 2) and s.segments[0].seed == 0
    assert s.shorthand() == "lambdamart@random.0:4,noisy_lambdamart~2:6" and parse_path(s.shorthand()) == s
    assert parse_path("noisy_lambdamart~0:6").shorthand() == "noisy_lambdamart:6"  # seed 0: the config's seed
    assert [x.seed for x in resolve(parse_path("noisy_lambdamart@c.*~3:4"), {"c": 2}).segments] == [3, 3]


def test_the_old_name_of_noisy_lambdamart_parses_with_one_deprecation_line(caplog, monkeypatch):
    """``stochastic_ndcg`` (LambdaMART on noisy scores, once misnamed after StochasticRank) is an alias:
    the same segment as the new name, and one warning line a process however often it is used."""
    from pipelines.plan import paths

    monkeypatch.setattr(paths, "_warned", set())
    with caplog.at_level("WARNING", logger="pipelines.plan.paths"):
        old = parse_path("mse:2,stochastic_ndcg~1:4")
        parse_path("stochastic_ndcg:3")
    assert old == parse_path("mse:2,noisy_lambdamart~1:4")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "'stochastic_ndcg' is deprecated" in lines[0] and "'noisy_lambdamart'" in lines[0]


@pytest.mark.parametrize(
    "text, msg",
    [
        ("mse200", "segment 'mse200' is not OBJECTIVE"),
        ("adaboost:10", "unknown objective 'adaboost' (one of: blend, lambdamart"),
        ("lambamart:10", "unknown objective 'lambamart'; did you mean 'lambdamart'?"),
        ("mse:0", "segment 'mse:0' has no trees"),
        ("", "segment '' is not OBJECTIVE"),
    ],
)
def test_parse_errors(text, msg):
    with pytest.raises(PathError, match=re.escape(msg)):
        parse_path(text)


def test_resolve_curricula():
    p = resolve(parse_path("lambdamart@q_bm25.*:10,lambdamart:5"), {"q_bm25": 3})
    assert [s.shorthand() for s in p.segments] == [
        "lambdamart@q_bm25.0:3",
        "lambdamart@q_bm25.1:3",
        "lambdamart@q_bm25.2:4",
        "lambdamart:5",
    ]
    with pytest.raises(PathError, match=r"no curriculum 'q_nrel' \(curricula: q_bm25\)"):
        resolve(parse_path("mse@q_nrel:5"), {"q_bm25": 2})
    with pytest.raises(PathError, match="q_bm25 has stages 0..1, not 2"):
        resolve(parse_path("mse@q_bm25.2:5"), {"q_bm25": 2})


def test_switch_point_grid_shares_prefixes():
    T = 500
    paths = [parse_path(f"mse:{t},lambdamart:{T - t}", f"MSE-{t}") for t in (100, 200, 300, 400)]
    plan = build_plan(paths)
    roots = plan.children(None)
    assert [(n.objective, n.t0, n.t1) for n in roots] == [("mse", 0, 100)]
    assert plan.trees == 400 + 400 + 300 + 200 + 100 == 1400  # instead of 4 x 500 = 2000
    # with the baseline and a curriculum path, nothing else is shared
    more = paths + [
        parse_path("lambdamart:500", "LambdaMART"),
        parse_path("lambdamart@q_bm25:100,lambdamart:400", "cl"),
    ]
    assert build_plan(more).trees == 1400 + 500 + 500
    with pytest.raises(PathError, match="distinct names"):
        build_plan([parse_path("mse:1", "a"), parse_path("mse:2", "a")])
