"""A local Hugging Face hub cache of the tiny study's inputs, in the hub's own layout (docs/real-engines.md)."""
