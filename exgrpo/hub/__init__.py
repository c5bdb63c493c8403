"""Hugging Face hub inputs: the pinned downloads of the paper's data and models, and a local hub cache.

- `download`: `exgrpo download`'s library (pinned sources, checksums, offline mode).
- `sources`: what is downloaded, at which revision; `locks`: one download at a time per file;
  `retries`: transient failures retried with backoff.
- `layout`: the hub's own cache layout; `tiny`: the tiny study's inputs published into it (docs/real-engines.md).
"""
