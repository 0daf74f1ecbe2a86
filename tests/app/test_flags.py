"""The command line's config flags (``pipelines.app.flags``): one table of keys per command; each flag's name, help,
type and default from its key's declaration."""

from __future__ import annotations

import pytest

from pipelines.app import flags
from pipelines.app.cli import build_parser
from pipelines.core.config import load_config

#: a value of each type, different from every default
SAMPLE = {int: 7, float: 0.375, str: "q_bm25", bool: True}
#: where a string must be one of a registry's or policy's names
VALUES = {"curriculum.pacing": "geometric", "difficulty.empty_queries": "exclude", "train.device": "cpu"}


@pytest.mark.parametrize("command", sorted(flags.FLAGS))
def test_each_flag_sets_its_key_with_the_config_s_type_and_shows_its_default(command):
    parser = build_parser()
    for f in flags.FLAGS[command]:
        tp, default = flags._field(f.key)
        kind = flags._scalar(tp)
        value = f.choices[-1] if f.choices else VALUES.get(f.key, SAMPLE[kind])
        argv = [command, *(["--src", "s", "--out", "o"] if command == "ingest" else [])]
        argv += ["--data", "d", "--out", "o"] if command in ("difficulty", "train", "curriculum") else []
        argv += ["--difficulty", "x", "--fold", "1"] if command == "curriculum" else []
        argv += ["--fold", "1"] if command == "train" else []
        argv += [f.flag] if kind is bool else [f.flag, str(value)]
        args = parser.parse_args(argv)
        given = flags.overrides(args, command)
        assert [o.split("=")[0] for o in given] == [f.key], (f.flag, given)
        section, _, name = f.key.rpartition(".")
        cfg = load_config(None, given) if f.key != "dataset" else None
        if cfg is not None:
            got = getattr(getattr(cfg, section) if section else cfg, name)
            assert got == value, (f.flag, got, value)
        # not given: no override, the config's value stands
        assert flags.overrides(parser.parse_args(argv[: -1 if kind is bool else -2]), command) == []
        shown = "none" if default is None else f'"{default}"' if isinstance(default, str) else str(default)
        action = next(
            a for a in parser._subparsers._group_actions[0].choices[command]._actions if f.flag in a.option_strings
        )
        assert action.help.endswith(f"(sets {f.key}; default {shown})"), action.help


def test_no_flag_is_declared_twice_and_every_key_exists():
    for command, fs in flags.FLAGS.items():
        assert len({f.flag for f in fs}) == len(fs), command
        for f in fs:
            flags._field(f.key)  # KeyError for a key the config does not have
    with pytest.raises(KeyError, match="no config key"):
        flags._field("train.etta")


def test_every_declared_flag_is_a_command_s_and_its_help_is_the_declaration():
    """A declaration's ``flag=`` (which the config's messages name) is a flag of some command, and every command's
    flag is its key's: neither list can name a flag the other lacks."""
    import typing

    from pipelines.core.config import Config, declared

    sections = {"": Config, **{k: v for k, v in typing.get_type_hints(Config).items() if hasattr(v, "SECTION")}}
    named = {
        f"{section}.{name}" if section else name: s.flag
        for section, cls in sections.items()
        for name, s in declared(cls).items()
        if s.flag
    }
    taken = {f.key: f.flag for fs in flags.FLAGS.values() for f in fs}
    assert named == taken
    eta = flags.flag_of("train.eta")
    assert (eta.flag, eta.help) == ("--eta", declared(typing.get_type_hints(Config)["train"])["eta"].doc)
    with pytest.raises(KeyError, match="declares no flag"):
        flags.flag_of("train.max_bin")
