"""Screenshots of guard's pages in headless Debian chromium (playwright, offline).

    python dashboards/screenshot.py PAGE.html OUT.png [--card TEXT] [--height PX]
    python dashboards/screenshot.py "http://127.0.0.1:5000/#/experiments/1/runs?compareRunsMode=CHART" \
        OUT.png --fill "Search metric charts=mlp.onnxruntime.host/latency"

--card TEXT: also shoot the dashboard's regressions list and the first series card whose
title contains TEXT, stacked, instead of the top of the page.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("out", type=Path)
    ap.add_argument("--card", help="series card whose heading contains this text")
    ap.add_argument("--wait", default="body", help="selector to wait for")
    ap.add_argument("--height", type=int, default=1100)
    ap.add_argument("--width", type=int, default=1300)
    ap.add_argument("--settle-ms", type=int, default=500)
    ap.add_argument("--fill", help="PLACEHOLDER=TEXT: wait for that input, type TEXT into it")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    url = a.page if "://" in a.page else Path(a.page).resolve().as_uri()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": a.width, "height": a.height})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        page.wait_for_selector(a.wait, state="attached", timeout=60_000)
        if a.fill:
            placeholder, _, value = a.fill.partition("=")
            box = page.get_by_placeholder(placeholder)
            box.wait_for(timeout=60_000)
            page.wait_for_timeout(3000)  # MLflow lays its charts out after the runs load
            close = page.locator("button[aria-label*='lose']")  # side panels (the assistant)
            if close.count():
                close.last.click(timeout=3000)
            box.fill(value)
        page.wait_for_timeout(a.settle_ms)
        if a.card:
            # At scroll 0, page and viewport coordinates agree: header down to the
            # regressions list, then the series card (an element screenshot), stacked.
            top = page.locator("header").bounding_box()
            regs = page.locator("#regressions").bounding_box()
            head = a.out.with_name(a.out.stem + ".top.png")
            page.screenshot(
                path=str(head),
                full_page=True,
                clip={
                    "x": 0,
                    "y": top["y"],
                    "width": a.width,
                    "height": regs["y"] + regs["height"] + 10 - top["y"],
                },
            )
            card_png = a.out.with_name(a.out.stem + ".card.png")
            page.locator("section.series", has_text=a.card).first.screenshot(path=str(card_png))
            _stack(head, card_png, a.out)
        else:
            page.screenshot(path=str(a.out))
        browser.close()
    if errors:
        print("page errors:", *errors, sep="\n  ", file=sys.stderr)
        return 1
    return 0


def _stack(top: Path, bottom: Path, out: Path) -> None:
    from PIL import Image

    a, b = Image.open(top), Image.open(bottom)
    im = Image.new("RGB", (max(a.width, b.width), a.height + b.height), "white")
    im.paste(a, (0, 0))
    im.paste(b, (0, a.height))
    im.save(out, optimize=True)
    top.unlink()
    bottom.unlink()


if __name__ == "__main__":
    sys.exit(main())
