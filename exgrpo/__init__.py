"""ExGRPO: learning to reason from experience (arXiv 2510.02245), as a library.

Packages by layer, lowest first; a package imports only those below it (tests/test_import_graph.py):
- `core`: the method (buffer, sampler, selection, advantages, loss, delayed start, reward) and its one
  configuration object (`core.config.ExGRPOConfig`), variants and switches; torch, numpy and math-verify only.
- `records`: metric names, atomic files, provenance: what a run writes and how.
- `settings`: run resolution (trainer settings, backbone registry, `resolve`), torch-free.
- `testbed`: the synthetic task and the tiny backbones.
- runtimes and evaluation: `tiny` (the CPU trainer), `verl_plugin` (verl on GPU clusters, and its CPU mode),
  `eval`, `prelim` (the preliminary study), `engines` (vLLM helpers), `hub` (downloads, the hub cache),
  `plugins` (replay ideas).
- `workflow`: the study configuration Snakemake runs, validated, sized and planned.
- `commands` and `cli`: the command line, thin argparse over the packages.
"""

__version__ = "0.1.0"
