"""The real inference engines on CPU (vLLM's CPU build beside verl and lm-eval): environment helpers and checks.

Nothing here is imported by the CPU study; see docs/real-engines.md."""
