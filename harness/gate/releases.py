"""Published releases as a history: each release of a PyPI family the PR, the release before it the base.

Where no repository holds the code an adapter loads (TRL's mirror ends before
``trl/kernels/`` existed; a library may publish wheels only), its releases are
the history a maintainer can still ask about: ``python -m harness.gate.history
trl==pypi --since 2025-06-01`` lists the final releases PyPI published from that
date (each one's base is the release before it, whatever its date), and
``trl==0.20.0,1.13.0,1.16.0`` names them instead. Each release is installed
``--no-deps`` into its own directory exactly as the gate installs ``trl==X``
(``harness.gate.specs.install``), and keyed by the bytes of the files under test
there, so consecutive releases whose files did not change cost one suite run.
The rest (an unloadable release is an ERROR row, cached verdicts, the table) is
the commit replay's (``harness.gate.history``).
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.gate import specs
from harness.targets.upstream.symbols import executed_digest

PYPI_JSON = "https://pypi.org/pypi/{name}/json"


def _fetch_json(name: str) -> dict:
    with urllib.request.urlopen(PYPI_JSON.format(name=name), timeout=60) as answer:  # noqa: S310 (a fixed https URL)
        return json.load(answer)


def published(family: str, fetch=None) -> list[tuple[str, str]]:
    """``(version, first upload date)`` of every final, unyanked release of ``family`` on PyPI, in version order."""
    data = (fetch or _fetch_json)(specs.PIP_NAMES.get(family, family))
    found = []
    for text, files in data.get("releases", {}).items():
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        live = [f for f in files if not f.get("yanked")]
        if live and not version.is_prerelease and not version.is_devrelease:
            found.append((version, text, min(f["upload_time"] for f in live)[:10]))
    return [(text, date) for _, text, date in sorted(found)]


def selected(family: str, which: str, since: str, fetch=None) -> list[tuple[str, str]]:
    """The releases to replay with their bases: ``which`` is ``pypi`` (PyPI's list, PRs dated ``since`` or later)
    or comma-separated versions (in the order given, every one after the first a PR; dates from PyPI if listed).

    Returns ``(version, date)`` pairs whose first element is the first PR's base.
    """
    if which == "pypi":
        releases = published(family, fetch)
        first = next((i for i, (_, date) in enumerate(releases) if date >= since), len(releases))
        return releases[max(first - 1, 0) :]
    versions = [v.strip() for v in which.split(",") if v.strip()]
    if len(versions) < 2:
        raise ValueError(f"{family}=={which}: give 'pypi' or at least two versions, e.g. {family}==1.15.0,1.16.0")
    try:
        dates = dict(published(family, fetch))
    except OSError:
        dates = {}
    return [(v, dates.get(v, "-")) for v in versions]


def install(family: str, version: str) -> Path:
    """The release's ``--no-deps`` install directory (installed once, shared with ``nox -s upstream -- family==X``)."""
    resolved = specs.resolve(f"{family}=={version}")
    specs.install(resolved)
    return Path(resolved.env[specs.CHECKOUT_VARIABLES[family]])


def content_key(directory: Path, paths, alone=None) -> str:
    """Identity of the code under test in an installed release: its files' bytes (``absent`` for a missing one), or
    for a file only loaded in part (``alone``: file -> definitions), what loading those executes."""
    alone, digest = alone or {}, hashlib.sha1()
    for path in paths:
        file = directory / path
        if not file.is_file():
            digest.update(b"absent")
        elif path in alone:
            digest.update(executed_digest(file.read_text(), alone[path]).encode())
        else:
            digest.update(file.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:12]
