"""lm-eval tasks of the choice family (a package only so that wheels ship its YAML and utils.py)."""
