"""lm-eval tasks of the tiny family (a package only so that wheels ship its YAML and utils.py)."""
