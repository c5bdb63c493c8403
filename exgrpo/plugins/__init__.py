"""Plug-in replay ideas, each declared as an entry point of the group `exgrpo.plugins` in pyproject.toml and
imported by `exgrpo.core.registry.load_plugins` (docs/plugins.md).

A module registers its implementation in one of the registries of `exgrpo.core.registry` and, optionally, a
named variant (`exgrpo.core.variants.register_variant`), which a study then lists under `ablations:`.
"""
