"""IFBench's verification functions, vendored from allenai/IFBench (Apache-2.0; README.md and LICENSE here).

Only the checkers are vendored (instructions, classic_instructions, instructions_registry, instructions_util);
the scoring loop that drives them is exgrpo.eval.ifbench_scorer.
"""
