"""Analysis of results/: the one loader of the results contract, published numbers, tables, figures, ledger.

Knows the world only through results/ (see results/README.md); imports no training runtime.
Entry point: `python -m analysis render|check --results results --source tiny|paper|paper-repro|all`.
"""
