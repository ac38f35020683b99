"""``python -m harness.gate.preview SUMMARY.md OUT.png``: see the pull-request comment as a reader does.

The comment is judged by its first screen, so its layout is checked by
looking at it: the Markdown is rendered to HTML (the ``markdown`` package,
with GitHub's folding ``<details>`` kept as HTML) in a page styled like a
GitHub comment, and headless Chromium (Debian packages ``chromium``,
``chromium-driver``) takes a screenshot of the first screen. A missing
package is a clear error naming how to install it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; font-size: 14px; line-height: 1.5;
       color: #1f2328; max-width: 880px; margin: 16px auto; padding: 16px 24px; border: 1px solid #d0d7de;
       border-radius: 6px; }
h2 { font-size: 1.4em; border-bottom: 1px solid #d8dee4; padding-bottom: .3em; }
h3 { font-size: 1.1em; margin-top: 1.2em; }
code { background: #eff1f3; border-radius: 4px; padding: .1em .3em; font-size: 85%; }
pre { background: #f6f8fa; border-radius: 6px; padding: 12px; overflow: auto; white-space: pre-wrap;
      word-break: break-all; }
pre code { background: none; padding: 0; }
details summary { cursor: pointer; font-weight: 600; }
"""
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")


def to_html(markdown_text: str) -> str:
    try:
        import markdown
    except ImportError:
        raise SystemExit("preview: needs the markdown package: python3 -m pip install markdown") from None
    body = markdown.markdown(markdown_text, extensions=["fenced_code", "md_in_html"])
    return f"<!doctype html><html><head><meta charset='utf-8'><style>{STYLE}</style></head><body>{body}</body></html>"


def screenshot(html: str, out: Path, width: int = 1000, height: int = 1300) -> None:
    browser = next((shutil.which(name) for name in CHROMIUM if shutil.which(name)), None)
    if browser is None:
        raise SystemExit("preview: needs headless Chromium: apt-get install chromium chromium-driver")
    with tempfile.TemporaryDirectory(prefix="lph-preview-") as tmp:
        page = Path(tmp) / "summary.html"
        page.write_text(html, encoding="utf-8")
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
        command += [f"--window-size={width},{height}", f"--screenshot={out.resolve()}", page.as_uri()]
        subprocess.run(command, check=True, capture_output=True, timeout=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.gate.preview", description=__doc__.splitlines()[0])
    parser.add_argument("summary", type=Path, help="a summary.md written by the gate")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--height", type=int, default=1300, help="pixels of the first screen (default 1300)")
    args = parser.parse_args(argv)
    screenshot(to_html(args.summary.read_text()), args.out, height=args.height)
    print(f"preview: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
