#!/usr/bin/env python3
"""Renders the ```mermaid blocks of Markdown reports in headless Chromium
with the Mermaid library, as GitHub does for a comment, and fails on a
Mermaid error.

    render-mermaid.py MERMAID_DIST CHROMIUM REPORT.md... [--screenshot REPORT.md=OUT.png]

MERMAID_DIST is a directory holding Mermaid's ES module build with an
`index.js` that exports `mermaid` (the one nicegui vendors; ci/test-render.sh
installs it). Each report's blocks are rendered on one page served from
127.0.0.1 (module scripts do not load from file://); the page writes what
happened into the DOM, which Chromium prints (--dump-dom). A block passes
when Mermaid renders it without an error into an SVG with one bar per task
line of the source. With --screenshot, the page of that report (its charts
only) is also saved as a PNG.
"""

import html
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>rollsafe timeline</title>
<style>body {{ font-family: sans-serif; margin: 16px; background: #fff; }}
h3 {{ font-size: 15px; margin: 18px 0 4px; }}</style></head>
<body>
{charts}
<pre id="rollsafe-result" style="display:none"></pre>
<script type="module">
import {{ mermaid }} from "./mermaid/index.js";
const results = [];
mermaid.initialize({{ startOnLoad: false, securityLevel: "strict", gantt: {{ useWidth: 1100 }} }});
for (const el of document.querySelectorAll("pre.mermaid-source")) {{
  const id = "chart" + results.length;
  try {{
    await mermaid.parse(el.textContent);
    const {{ svg }} = await mermaid.render(id, el.textContent);
    const holder = document.createElement("div");
    holder.innerHTML = svg;
    el.replaceWith(holder);
    results.push({{ ok: true, tasks: holder.querySelectorAll("rect.task").length,
                    text: holder.textContent.slice(0, 4000) }});
  }} catch (e) {{
    results.push({{ ok: false, error: String(e && e.message || e) }});
  }}
}}
document.getElementById("rollsafe-result").textContent = "RESULT:" + JSON.stringify(results) + ":END";
</script></body></html>
"""

BLOCK = re.compile(r"^```mermaid\n(.*?)^```$", re.M | re.S)
TASK = re.compile(r"^    (?!title |dateFormat |axisFormat |section ).* :")


def blocks(markdown):
    return [m.group(1) for m in BLOCK.finditer(markdown)]


def page(sources, headings):
    charts = "\n".join(
        f"<h3>{html.escape(h)}</h3>\n<pre class=\"mermaid-source\">{html.escape(s)}</pre>"
        for h, s in zip(headings, sources)
    )
    return PAGE.format(charts=charts)


def serve(root):
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=root, **k)
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def chromium(binary, url, *extra):
    # The budget is virtual time: Chromium fast-forwards timers and stops
    # once the page is idle, so it is an upper bound, not a wait.
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-dev-shm-usage", "--virtual-time-budget=20000", *extra, url],
        capture_output=True, text=True, timeout=120,
    )


def main(argv):
    shots = {}
    args = []
    it = iter(argv[1:])
    for a in it:
        if a == "--screenshot":
            report, png = next(it).split("=", 1)
            shots[report] = png
        else:
            args.append(a)
    dist, binary, reports = args[0], args[1], args[2:]
    failed = 0
    with tempfile.TemporaryDirectory() as root:
        os.symlink(os.path.abspath(dist), os.path.join(root, "mermaid"))
        server = serve(root)
        base = f"http://127.0.0.1:{server.server_port}"
        for i, report in enumerate(reports):
            with open(report, encoding="utf-8") as f:
                markdown = f.read()
            sources = blocks(markdown)
            if not sources:
                print(f"{report}: no mermaid block")
                failed += 1
                continue
            headings = re.findall(r"^\*\*(\S+)\*\* `[^`]*`\n\n```mermaid", markdown, re.M)
            headings += [""] * (len(sources) - len(headings))
            name = f"report{i}.html"
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(page(sources, headings))
            out = chromium(binary, f"{base}/{name}", "--dump-dom")
            found = re.search(r"RESULT:(.*?):END", html.unescape(out.stdout), re.S)
            if not found:
                print(f"{report}: the page did not finish rendering (exit {out.returncode})")
                print(out.stderr[-2000:])
                failed += 1
                continue
            for n, (source, result) in enumerate(zip(sources, json.loads(found.group(1)))):
                expected = sum(1 for line in source.splitlines() if TASK.match(line))
                where = f"{report}: chart {n + 1} ({headings[n] or 'untitled'})"
                if not result["ok"]:
                    print(f"{where}: Mermaid error: {result['error']}")
                    failed += 1
                elif result["tasks"] != expected:
                    print(f"{where}: {result['tasks']} bars drawn, {expected} task lines")
                    failed += 1
                else:
                    print(f"{where}: rendered, {expected} bars")
            if report in shots:
                shot = chromium(binary, f"{base}/{name}", f"--screenshot={os.path.abspath(shots[report])}",
                                "--window-size=1200,520", "--hide-scrollbars")
                ok = shot.returncode == 0 and os.path.exists(shots[report])
                print(f"{report}: screenshot {shots[report]}" if ok else f"{report}: no screenshot: {shot.stderr[-500:]}")
                failed += 0 if ok else 1
        server.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
