"""What a run leaves behind, and how it is named and written: pure Python, no runtime.

- `metrics`: the metric registry (names, meanings, which runtime logs each); `metrics_verl`: their verl names.
- `io`: atomic writes, directory publishing, manifests, hashes, JSONL.
- `provenance`: the record every results file carries (config, seed, commit, machine, library versions).
"""
