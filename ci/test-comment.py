#!/usr/bin/env python3
"""Tests action/review-comment.py against a local fake of the two API
calls it makes (list the comments; create or update one), for GitHub and
GitLab, on 127.0.0.1: a first run creates the comment, a second updates
the same one in place, another target gets its own, a summary past
GitHub's limit keeps its errors and links to the full one, a read-only
token (a fork's) is a log line and exit 0, and the token never reaches the
log. GitLab runs the copy that the component (templates/rollsafe.yml)
embeds, checked equal to the file. Prints every call the fake saw.

    python3 ci/test-comment.py
    python3 ci/test-comment.py --embed   # after editing the script: copy it into the component
"""

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.parse

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPT = os.path.join(ROOT, "action", "review-comment.py")
COMPONENT = os.path.join(ROOT, "templates", "rollsafe.yml")
TOKEN = "ghs_fake-token-that-must-never-be-printed"


class Fake:
    """Comments per thread, the calls seen, and what to refuse."""

    def __init__(self):
        self.comments = {}  # thread path -> list of {id, body}
        self.calls = []
        self.refuse_writes = False
        self.next_id = 1000
        self.lock = threading.Lock()

    def thread(self, path):
        return self.comments.setdefault(path, [])


def handler_for(fake):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, code, payload):
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorised(self):
            return self.headers.get("Authorization") == f"Bearer {TOKEN}" or self.headers.get("PRIVATE-TOKEN") == TOKEN

        def handle_any(self):
            url = urllib.parse.urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            with fake.lock:
                fake.calls.append((self.command, url.path + (f"?{url.query}" if url.query else ""),
                                   len(body["body"]) if body else None))
                if not self.authorised():
                    return self.reply(401, {"message": "Bad credentials"})
                parts = url.path.rstrip("/").split("/")
                if self.command == "GET":
                    q = urllib.parse.parse_qs(url.query)
                    page, per = int(q["page"][0]), int(q["per_page"][0])
                    items = fake.thread(url.path)
                    return self.reply(200, items[(page - 1) * per: page * per])
                if fake.refuse_writes:
                    return self.reply(403, {"message": "Resource not accessible by integration"})
                if self.command == "POST":
                    fake.next_id += 1
                    c = {"id": fake.next_id, "body": body["body"]}
                    fake.thread(url.path).append(c)
                    return self.reply(201, c)
                # PATCH /repos/o/r/issues/comments/ID (GitHub), PUT
                # /projects/P/merge_requests/N/notes/ID (GitLab).
                wanted = int(parts[-1])
                for items in fake.comments.values():
                    for c in items:
                        if c["id"] == wanted:
                            c["body"] = body["body"]
                            return self.reply(200, c)
                return self.reply(404, {"message": "Not Found"})

        do_GET = do_POST = do_PATCH = do_PUT = handle_any

    return Handler


def summary(verdict, errors, filler=0):
    rows = "\n".join(
        f"| **error** | `locks.blocking-index-build` | `migrations/V{4 + i}__x.sql:1` | blocks writes {i} |"
        for i in range(errors)
    )
    pad = "\n".join(f"| warn | `plan.x` | `m.sql:{i}` | {'w' * 80} |" for i in range(filler))
    return (f"### rollsafe verify\n\n**{verdict}**: {errors} error(s)\n\n#### Findings\n\n"
            f"| severity | id | where | message |\n|---|---|---|---|\n{rows}\n{pad}\n\n#### Lock timeline\n")


def embedded_copy():
    """The script as the GitLab component's note job writes it (a heredoc
    in a YAML block, indented six spaces)."""
    text = open(COMPONENT, encoding="utf-8").read()
    inner = text.split("<<'ROLLSAFE_SCRIPT_END'\n", 1)[1].split("\n      ROLLSAFE_SCRIPT_END\n", 1)[0]
    return "\n".join(line[6:] for line in inner.split("\n")) + "\n"



def embed():
    """Writes action/review-comment.py into the component's heredoc."""
    text = open(COMPONENT, encoding="utf-8").read()
    start = text.index("<<'ROLLSAFE_SCRIPT_END'\n") + len("<<'ROLLSAFE_SCRIPT_END'\n")
    end = text.index("\n      ROLLSAFE_SCRIPT_END\n")
    script = open(SCRIPT, encoding="utf-8").read().rstrip("\n")
    indented = "\n".join(("      " + l) if l else "" for l in script.split("\n"))
    with open(COMPONENT, "w", encoding="utf-8") as f:
        f.write(text[:start] + indented + text[end:])


def run(env_extra, body, work, script=SCRIPT):
    path = os.path.join(work, "summary.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(body)
    env = {"PATH": os.environ["PATH"], "ROLLSAFE_COMMENT_FILE": path, "ROLLSAFE_COMMENT_TOKEN": TOKEN,
           "ROLLSAFE_COMMENT_LINK": "https://ci.example/run/7", **env_extra}
    out = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=60)
    log = out.stdout + out.stderr
    assert out.returncode == 0, f"exit {out.returncode}: {log}"
    assert TOKEN not in log, "the token reached the log"
    return log.strip()


def calls_since(fake, n):
    return fake.calls[n:]


def show(title, calls, log):
    print(f"{title}:")
    for method, path, size in calls:
        print(f"    {method} {path}" + (f"  (body {size} characters)" if size is not None else ""))
    print(f"    log: {log}")


def main():
    fake = Fake()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_for(fake))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = f"http://127.0.0.1:{server.server_port}"
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        event = os.path.join(work, "event.json")
        with open(event, "w") as f:
            json.dump({"pull_request": {"number": 42}}, f)
        github = {"GITHUB_API_URL": api, "GITHUB_REPOSITORY": "shop/books", "GITHUB_EVENT_PATH": event,
                  "ROLLSAFE_COMMENT_TARGET": "PG 13,15 migrations"}
        thread = "/repos/shop/books/issues/42/comments"
        # Someone else's comments are there first, one of them quoting
        # rollsafe's title: only the marker identifies the comment.
        fake.thread(thread).extend({"id": i, "body": "### rollsafe verify (quoted by a reviewer)"} for i in (1, 2))

        def check(cond, what):
            nonlocal failures
            if not cond:
                failures += 1
                print(f"FAILED: {what}")

        n = len(fake.calls)
        log = run(github, summary("FAILED", 2), work)
        first = calls_since(fake, n)
        show("GitHub, first run", first, log)
        check([c[0] for c in first] == ["GET", "POST"], "first run: list, then create")
        created = fake.thread(thread)[-1]
        check(created["body"].startswith("<!-- rollsafe:verify target=") and "**FAILED**" in created["body"],
              "the created comment carries the marker and the summary")

        n = len(fake.calls)
        log = run(github, summary("PASSED", 0), work)
        second = calls_since(fake, n)
        show("GitHub, second run", second, log)
        check([c[0] for c in second] == ["GET", "PATCH"], "second run: list, then update")
        check(second[-1][1] == f"/repos/shop/books/issues/comments/{created['id']}", "the same comment updated")
        check(len(fake.thread(thread)) == 3 and "**PASSED**" in fake.thread(thread)[-1]["body"],
              "one rollsafe comment, now PASSED")

        n = len(fake.calls)
        log = run({**github, "ROLLSAFE_COMMENT_TARGET": "PG 17 migrations"}, summary("PASSED", 0), work)
        other = calls_since(fake, n)
        show("GitHub, another target", other, log)
        check([c[0] for c in other] == ["GET", "POST"] and len(fake.thread(thread)) == 4,
              "another target gets a comment of its own")

        n = len(fake.calls)
        log = run(github, summary("FAILED", 300, filler=800), work)
        big = calls_since(fake, n)
        show("GitHub, a summary past 65536 characters", big, log)
        body = fake.thread(thread)[2]["body"]
        check([c[0] for c in big] == ["GET", "PATCH"], "the size-limit run updates the same comment")
        check(len(body) <= 65536, f"the body fits GitHub's limit ({len(body)})")
        check(body.count("| **error** |") == 300 and "| warn |" not in body, "every error kept, the rest left")
        check("https://ci.example/run/7" in body and "**FAILED**" in body, "the verdict and the link are there")

        fake.refuse_writes = True
        n = len(fake.calls)
        log = run({**github, "ROLLSAFE_COMMENT_TARGET": "fork"}, summary("FAILED", 1), work)
        show("GitHub, a fork's read-only token", calls_since(fake, n), log)
        check("read-only" in log and "HTTP 403" in log, "a read-only token is said in the log")
        fake.refuse_writes = False

        log = run({k: v for k, v in github.items() if k != "GITHUB_EVENT_PATH"}, summary("PASSED", 0), work)
        check("not a pull request" in log, "no pull request, no comment")

        # The component's note job runs its own copy: it must be this one.
        copy = os.path.join(work, "component-copy.py")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(embedded_copy())
        check(embedded_copy() == open(SCRIPT, encoding="utf-8").read(),
              "templates/rollsafe.yml embeds action/review-comment.py as it is")
        gitlab = {"CI_API_V4_URL": f"{api}/api/v4", "CI_PROJECT_ID": "shop/books", "CI_MERGE_REQUEST_IID": "7",
                  "ROLLSAFE_COMMENT_TARGET": "PG 15"}
        notes = "/api/v4/projects/shop%2Fbooks/merge_requests/7/notes"
        for title, verdict, methods in (("GitLab, first run", "FAILED", ["GET", "POST"]),
                                        ("GitLab, second run", "PASSED", ["GET", "PUT"])):
            n = len(fake.calls)
            log = run(gitlab, summary(verdict, 1), work, script=copy)
            calls = calls_since(fake, n)
            show(title, calls, log)
            check([c[0] for c in calls] == methods, f"{title}: {methods}")
            check(all(c[1].startswith(notes) for c in calls), f"{title}: the merge request's notes")
        check(len(fake.thread(notes)) == 1 and "**PASSED**" in fake.thread(notes)[0]["body"], "one note, updated")

        log = run({**gitlab, "ROLLSAFE_COMMENT_TOKEN": ""}, summary("PASSED", 0), work, script=copy)
        check("no token" in log, "GitLab without a token: a log line")
    server.shutdown()
    print("comment tests: " + ("all passed" if not failures else f"{failures} failed"))
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--embed"]:
        embed()
        sys.exit(0)
    sys.exit(main())
