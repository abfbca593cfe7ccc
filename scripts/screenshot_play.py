"""Screenshot agents.serve's page with a game in progress (docs/play.png).

    python scripts/screenshot_play.py [--out docs/play.png] [--width 1280] [--height 800]
                                      [--seed 3] [--turns 12] [--chromium /usr/bin/chromium]

Serves the page on a free loopback port against HeuristicBot (replays in
a temporary folder), plays --turns turns of the human's seat by clicks in
headless Chromium, each the heuristic's own choice, picks a card of the
hand for the next move, and saves a PNG of the viewport.
"""
import argparse
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.play import make_agent  # noqa: E402
from agents.serve import PlayServer  # noqa: E402


def click_move(page, text):
    """Make the move `text` ("play Y7", "draw pile R", ...) by clicks."""
    verb, arg = text.split(" ", 1)
    if verb in ("play", "discard"):
        page.click(f'#hand .card[data-card="{arg}"]')
        page.click(f"#{verb}")
    elif arg == "deck":
        page.click("#deck")
    else:
        page.click(f"#pile-{arg.split()[-1]}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "docs" / "play.png"))
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=800)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as replays:
        server = PlayServer(("127.0.0.1", 0), make_agent("heuristic"), replays, seed=args.seed)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=args.chromium)
                page = browser.new_page(viewport={"width": args.width, "height": args.height})
                page.goto(server.url)
                page.wait_for_selector("#hand .card")
                table = next(iter(server.tables.values()))
                for _ in range(2 * args.turns):
                    state = table.state
                    n = len(table.log)
                    click_move(page, state.game.action_to_string(state.game.heuristic_action(state)))
                    page.wait_for_function(f"view && view.moves > {n}")
                state = table.state
                card = state.game.action_to_string(state.game.heuristic_action(state)).split()[1]
                page.click(f'#hand .card[data-card="{card}"]')
                page.screenshot(path=args.out)
                browser.close()
        finally:
            server.shutdown()
            server.server_close()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
