"""lm-eval tasks of the math family (a package only so that wheels ship its YAML and utils.py)."""
