"""Open a Snakemake HTML report in headless Chromium and list what is broken in it.

Debian's `chromium` is driven over the DevTools protocol through a pipe (`--remote-debugging-pipe`: JSON messages
separated by NUL bytes on file descriptors 3 and 4), so no WebDriver, websocket library or browser download is
needed. `check_report` loads the page and lets the report's app render. It then lists:
- JavaScript errors: uncaught exceptions, `console.error`, and the browser's error log entries;
- categories that the report lacks, or that its app did not render;
- captions that hold a docutils system message (broken reStructuredText), or that start with punctuation (a
  template value such as `{{ snakemake.wildcards.x }}` that rendered empty);
- figures whose image does not decode in the browser.

    python tests/support/browser.py results/report.html [--category Tables ...]   # exit 1 if anything is broken
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
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


class DevTools:
    """A headless Chromium and its DevTools pipe: send a command, wait for its answer, keep every event."""

    def __init__(self, binary: str):
        self.profile = tempfile.mkdtemp(prefix="report-browser-")
        to_browser, self.write_fd = os.pipe()
        self.read_fd, from_browser = os.pipe()
        command = (f"exec {binary} --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage "
                   f"--remote-debugging-pipe --user-data-dir={self.profile} about:blank 3<&{to_browser} 4>&{from_browser}")
        self.process = subprocess.Popen(["bash", "-c", command], pass_fds=(to_browser, from_browser),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self.buffer, self.events, self.next_id = b"", [], 0

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            for reply in self._messages(deadline):
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
                self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for event in [e for e in self.events if e.get("method") == method]:
                return event
            self.events.extend(self._messages(deadline))

    def _messages(self, deadline: float) -> list[dict]:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.read_fd], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\0")
        return [json.loads(m) for m in complete if m]

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        os.close(self.read_fd)
        os.close(self.write_fd)
        shutil.rmtree(self.profile, ignore_errors=True)


def errors_of(events: list[dict]) -> list[str]:
    out = []
    for event in events:
        params = event.get("params", {})
        if event.get("method") == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            out.append("uncaught: " + details.get("exception", {}).get("description", details.get("text", "")))
        elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            out.append("console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif event.get("method") == "Log.entryAdded" and params["entry"]["level"] == "error":
            out.append(f"{params['entry']['source']}: {params['entry']['text']}")
    return out


def check_report(html: Path, categories=CATEGORIES, settle_s: float = 1.0) -> list[str]:
    """Everything broken in the report at `html`, as sentences (empty: it loads and shows what it should)."""
    binary = chromium()
    if binary is None:
        raise FileNotFoundError("no chromium on PATH (Debian: apt-get install chromium)")
    browser = DevTools(binary)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Page.navigate", {"url": Path(html).resolve().as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired", timeout=120)
        time.sleep(settle_s)  # the app renders after the load event
        probe = browser.send("Runtime.evaluate", {"expression": PROBE, "awaitPromise": True, "returnByValue": True},
                             session=session, timeout=120)
        found = json.loads(probe["result"]["value"])
        problems = errors_of(browser.events)
    finally:
        browser.close()
    if not found["haveData"]:
        return [*problems, "the page holds no report data (results, categories)"]
    for name in categories:
        if name not in found["categories"]:
            problems.append(f"category {name!r} is missing from the report")
        elif name not in found["rendered"]:
            problems.append(f"category {name!r} was not rendered by the report's app")
    problems += [f"caption of {path} has a docutils system message (broken reStructuredText)"
                 for path in found["systemMessages"]]
    problems += [f"caption of {path} starts with punctuation: a template value in it rendered empty"
                 for path in found["emptyStarts"]]
    problems += [f"image {path} does not decode" for path in found["brokenImages"]]
    if not found["images"]:
        problems.append("the report holds no image")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path)
    parser.add_argument("--category", action="append", help="a category the report must show (default: "
                        + ", ".join(CATEGORIES) + ")")
    args = parser.parse_args()
    problems = check_report(args.html, tuple(args.category or CATEGORIES))
    for problem in problems:
        print(problem)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
