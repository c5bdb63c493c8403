"""Plug-in replay ideas: every module here is imported by `exgrpo.core.registry.load_plugins` (docs/plugins.md).

A module registers its implementation in one of the registries of `exgrpo.core.registry` and, optionally, a
named variant (`exgrpo.variants.register_variant`), which a study then lists under `ablations:`.
"""
