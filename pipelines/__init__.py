"""The library, one package per question. Imports go one way, top to bottom (``.importlinter``):

``app`` -> ``report`` -> ``tracking`` -> ``study`` -> ``execution`` -> ``worker`` -> ``store`` ->
{``plan``, ``data``} -> ``core`` -> ``udfs``.

See docs/ARCHITECTURE.md for the map.
"""
