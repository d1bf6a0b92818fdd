"""report.html as a person sees it: rendered by a real headless Chromium (Debian's
`chromium` package), with a screenshot and a check that every figure loaded.

    python tests/report_browser.py RUN_DIR/report.html [SHOT.png]

prints one line per image (alt text, natural width x height) and exits 1 when an image did
not load. Used by tests/test_report.py (skipped when no chromium is installed).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")

# Runs once the page (and its data-URI images) has loaded: writes what every <img> decoded
# to into the DOM, where --dump-dom shows it.
_PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete,
      width: i.naturalWidth, height: i.naturalHeight}));
  const pre = document.createElement('pre');
  pre.id = 'image-check';
  pre.textContent = JSON.stringify({images: imgs, height: document.body.scrollHeight});
  document.body.appendChild(pre);
});
</script>"""


def find_browser() -> str | None:
    """Path of a Chromium-family browser on PATH, or None."""
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


def _run(browser: str, *args: str, timeout: float = 120) -> str:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--disable-dev-shm-usage", "--no-first-run", "--virtual-time-budget=10000", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"{browser} failed ({res.returncode}): {res.stderr[-2000:]}")
    return res.stdout


def check_images(html_path: Path, browser: str) -> dict:
    """{"images": [{"alt", "complete", "width", "height"}], "height": page height in px}
    of the page as Chromium loaded it (a probe script is added to a temporary copy)."""
    text = html_path.read_text()
    probed = text.replace("</body>", _PROBE + "</body>") if "</body>" in text else text + _PROBE
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / html_path.name
        page.write_text(probed)
        dom = _run(browser, "--dump-dom", page.as_uri())
    m = re.search(r'<pre id="image-check">(.*?)</pre>', dom, re.S)
    if not m:
        raise RuntimeError("the probe script did not run (no #image-check in the DOM)")
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">"))


def screenshot(html_path: Path, png: Path, browser: str, width: int = 1200,
               height: int = 2000) -> Path:
    """A PNG of the page, `width` x `height` CSS pixels."""
    png.parent.mkdir(parents=True, exist_ok=True)
    _run(browser, f"--screenshot={png}", f"--window-size={width},{height}", html_path.as_uri())
    if not png.is_file():
        raise RuntimeError(f"{browser} wrote no screenshot at {png}")
    return png


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__.strip().splitlines()[3].strip())
        return 2
    browser = find_browser()
    if browser is None:
        print("error: no chromium found (apt-get install chromium)", file=sys.stderr)
        return 2
    html_path = Path(argv[0]).resolve()
    found = check_images(html_path, browser)
    bad = 0
    for img in found["images"]:
        ok = img["complete"] and img["width"] > 0
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {img['width']}x{img['height']} {img['alt']}")
    if len(argv) == 2:
        shot = screenshot(html_path, Path(argv[1]).resolve(), browser,
                          height=min(max(int(found["height"]), 600), 16000))
        print(f"screenshot: {shot}")
    return 1 if bad or not found["images"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
