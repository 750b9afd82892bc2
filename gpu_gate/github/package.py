"""gpu-gate from a pinned artifact: the action's ``package`` and ``package-sha256`` inputs.

A wheel or an sdist of gpu-gate (a release asset, or a copy in an organisation's artifact store),
named by URL or by a path in the workspace, is read whole and checked against the SHA-256 the
workflow pins before anything of it is used: a file whose digest differs is refused and nothing is
installed. gpu-gate is pure Python, so nothing is built: the ``gpu_gate`` package is taken out of
the archive, and only its own files, onto the interpreter's import path (see install.py).

Standard library only: this runs before gpu-gate is importable, from the action's checkout.
"""
from __future__ import annotations

import hashlib
import io
import posixpath
import re
import tarfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

MAX_BYTES = 64 * 1024 * 1024  # a gpu-gate wheel is well under 1 MiB: anything this large is not one
SUFFIXES = (".whl", ".tar.gz")
PACKAGE = "gpu_gate"


def fail(message: str) -> SystemExit:
    return SystemExit(f"::error title=gpu-gate::{message}")


def fetch(source: str, sha256: str, workspace: Path) -> tuple[str, bytes]:
    """(file name, bytes) of the artifact at ``source``, checked against ``sha256``."""
    want = sha256.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{64}", want):
        raise fail(f"package-sha256 {sha256!r} is not a SHA-256 (64 hex digits): pin the digest that the release's "
                   "SHA256SUMS lists for the file")
    url = urllib.parse.urlsplit(source)
    name = posixpath.basename(url.path if url.scheme else source)
    if not name.endswith(SUFFIXES):
        raise fail(f"package {source!r} is neither a wheel (.whl) nor an sdist (.tar.gz) of gpu-gate")
    data = _download(source) if url.scheme in ("http", "https", "file") else _read(workspace / source, source)
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise fail(f"{name}: its SHA-256 is {got}, not the {want} that package-sha256 pins; nothing was installed "
                   "(the file changed or is not the one you pinned: take both from the same release)")
    return name, data


def _download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as answer:  # noqa: S310 - the scheme is checked above
            data: bytes = answer.read(MAX_BYTES + 1)
    except (OSError, ValueError) as exc:
        raise fail(f"could not download package {url}: {exc}") from exc
    if len(data) > MAX_BYTES:
        raise fail(f"package {url} is larger than {MAX_BYTES // (1024 * 1024)} MiB: not a gpu-gate wheel or sdist")
    return data


def _read(path: Path, given: str) -> bytes:
    try:
        if path.stat().st_size > MAX_BYTES:
            raise fail(f"package {given} is larger than {MAX_BYTES // (1024 * 1024)} MiB: not a gpu-gate wheel or sdist")
        return path.read_bytes()
    except OSError as exc:
        raise fail(f"package {given}: cannot read {path} ({exc.strerror or exc}); a path is relative to the "
                   "workspace") from exc


def unpack(name: str, data: bytes, site: Path) -> int:
    """Write the archive's ``gpu_gate`` package under ``site``; returns the number of files."""
    files = _wheel_files(data) if name.endswith(".whl") else _sdist_files(data)
    if not any(rel == f"{PACKAGE}/__init__.py" for rel, _ in files):
        raise fail(f"{name} holds no {PACKAGE} package: not a gpu-gate wheel or sdist")
    for rel, content in files:
        target = site / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return len(files)


def _safe(rel: str, name: str) -> str:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise fail(f"{name}: refusing the archive member {rel!r} (an absolute path or a '..' component)")
    return rel


def _wheel_files(data: bytes) -> list[tuple[str, bytes]]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return [(_safe(i.filename, "wheel"), z.read(i)) for i in z.infolist()
                    if i.filename.startswith(f"{PACKAGE}/") and not i.is_dir()]
    except zipfile.BadZipFile as exc:
        raise fail(f"the wheel is not a zip archive ({exc})") from exc


def _sdist_files(data: bytes) -> list[tuple[str, bytes]]:
    """The sdist's ``<name>-<version>/gpu_gate/...`` regular files, without the top directory."""
    out = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
            for member in t.getmembers():
                _top, _, rel = member.name.partition("/")
                if not rel.startswith(f"{PACKAGE}/") or member.isdir():
                    continue
                if not member.isfile():  # links and devices have no place in a package
                    raise fail(f"sdist: refusing {member.name!r}, which is not a regular file")
                extracted = t.extractfile(member)
                assert extracted is not None
                out.append((_safe(rel, "sdist"), extracted.read()))
    except tarfile.TarError as exc:
        raise fail(f"the sdist is not a gzip tar archive ({exc})") from exc
    return out
