"""The library, one package per question. Imports go one way, top to bottom (``.importlinter``):

``app`` -> ``report`` -> ``tracking`` -> ``study`` -> ``execution`` -> ``worker`` -> ``store`` ->
{``plan``, ``data``} -> ``kernel`` -> ``core`` -> ``udfs``. ``kernel`` is the code that decides numbers; every
key's code identity covers part of it and nothing else.

See docs/explanation/architecture.md for the map.
"""
