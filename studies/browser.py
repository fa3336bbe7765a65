"""Open a Snakemake HTML report in headless Chromium and list what is broken in it.

Playwright drives Debian's `chromium` (`executable_path`; no browser download). `check_report` loads the page and
lets the report's app render, optionally saving a screenshot of its first page. It then lists:
- JavaScript errors: uncaught exceptions, `console.error`, and requests that failed;
- categories that the report lacks, or that its app did not render;
- captions that hold a docutils system message (broken reStructuredText), or that start with punctuation (a
  template value such as `{{ snakemake.wildcards.x }}` that rendered empty);
- figures whose image does not decode in the browser.

    python studies/browser.py results/report.html [--category Tables ...] [--screenshot report.png]
    # exit 1 if anything is broken
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

CATEGORIES = ("Summary", "Tables", "Figures", "Training curves", "Simulation")
# In the page: the report's own data (results, categories), what its app rendered, and every image decoded.
PROBE = """(async () => {
  const out = {haveData: typeof results === 'object' && typeof categories === 'object', categories: [],
               rendered: document.body.innerText, systemMessages: [], emptyStarts: [], images: 0,
               brokenImages: []};
  if (!out.haveData) return JSON.stringify(out);
  out.categories = Object.keys(categories);
  for (const [path, r] of Object.entries(results)) {
    if ((r.caption || '').includes('system-message')) out.systemMessages.push(path);
    const text = (r.caption || '').replace(/<[^>]*>/g, '').trim();
    if (/^[:;,.]/.test(text)) out.emptyStarts.push(path);
    if ((r.mime_type || '').startsWith('image/') && r.data_uri) {
      out.images += 1;
      const img = new Image();
      img.src = r.data_uri;
      try { await img.decode(); if (!img.naturalWidth) out.brokenImages.push(path); }
      catch (e) { out.brokenImages.push(path); }
    }
  }
  return JSON.stringify(out);
})()"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def check_report(html: Path, categories=CATEGORIES, settle_s: float = 1.0, screenshot: Path | None = None) -> list[str]:
    """Everything broken in the report at `html`, as sentences (empty: it loads and shows what it should)."""
    from playwright.sync_api import sync_playwright

    binary = chromium()
    if binary is None:
        raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
    problems: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=binary, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        try:
            page = browser.new_page()
            page.on("pageerror", lambda error: problems.append(f"uncaught: {error.name}: {error.message}"))
            page.on(
                "console",
                lambda message: (
                    problems.append(f"console.error: {message.text}") if message.type in ("error", "assert") else None
                ),
            )
            page.on(
                "requestfailed",
                lambda request: problems.append(f"request failed: {request.url[:200]} ({request.failure})"),
            )
            page.goto(Path(html).resolve().as_uri(), wait_until="load", timeout=120_000)
            page.wait_for_timeout(settle_s * 1000)  # the app renders after the load event
            found = json.loads(page.evaluate(PROBE))
            if screenshot is not None:
                page.screenshot(path=str(screenshot))
        finally:
            browser.close()
    if not found["haveData"]:
        return [*problems, "the page holds no report data (results, categories)"]
    for name in categories:
        if name not in found["categories"]:
            problems.append(f"category {name!r} is missing from the report")
        elif name not in found["rendered"]:
            problems.append(f"category {name!r} was not rendered by the report's app")
    problems += [
        f"caption of {path} has a docutils system message (broken reStructuredText)" for path in found["systemMessages"]
    ]
    problems += [
        f"caption of {path} starts with punctuation: a template value in it rendered empty"
        for path in found["emptyStarts"]
    ]
    problems += [f"image {path} does not decode" for path in found["brokenImages"]]
    if not found["images"]:
        problems.append("the report holds no image")
    return problems


# Set to 1 where the report must be opened (CI): without chromium, the check then fails instead of being skipped.
REQUIRE_ENV = "PERTURBED_LM_REQUIRE_BROWSER"


def browser_problems(workdir: Path, categories=CATEGORIES) -> list[str]:
    """A finished study's <workdir>/report.html opened in headless Chromium, its first page saved beside it
    (report.png); without chromium it is skipped, saying so, unless REQUIRE_ENV is 1."""
    if chromium() is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            return [f"no chromium on PATH to open {workdir / 'report.html'} in, and {REQUIRE_ENV}=1"]
        print(
            f"{workdir / 'report.html'} not opened in a browser: no chromium on PATH (Debian: apt-get install chromium)"
        )
        return []
    screenshot = workdir / "report.png"
    problems = check_report(workdir / "report.html", categories, screenshot=screenshot)
    if not screenshot.is_file() or screenshot.stat().st_size < 10_000:
        problems.append(f"{screenshot}: the report's first page saved as under 10 kB, so it rendered next to nothing")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path)
    parser.add_argument(
        "--category", action="append", help="a category the report must show (default: " + ", ".join(CATEGORIES) + ")"
    )
    parser.add_argument("--screenshot", type=Path, help="save a PNG of the report's first page here")
    args = parser.parse_args()
    problems = check_report(args.html, tuple(args.category or CATEGORIES), screenshot=args.screenshot)
    for problem in problems:
        print(problem)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
