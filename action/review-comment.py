#!/usr/bin/env python3
"""Keeps one rollsafe comment on a pull request (GitHub) or one note on a
merge request (GitLab) per target, up to date: the Markdown summary that
`rollsafe verify --output markdown=FILE` wrote (verdict, findings, deploy
order, lock timelines).

The comment is found again by a hidden marker, `<!-- rollsafe:verify
target=KEY -->`, KEY naming the target (the majors, the project) without
any secret in it: created on the first run, edited in place after. Only
two API calls: list the comments, then create or update one. Python's
standard library only: GitHub's runners and any image with python3 run it
as is.

Everything comes from the environment (the action and the component pass
their inputs only that way):

    ROLLSAFE_COMMENT_FILE    the Markdown summary
    ROLLSAFE_COMMENT_TARGET  what the run was about ("PG 13,15 db/migrations");
                             hashed into the marker, so one comment per target
    ROLLSAFE_COMMENT_LINK    where the full summary is (the run's page)
    ROLLSAFE_COMMENT_TOKEN   the token (never printed)
    GitHub: GITHUB_API_URL, GITHUB_REPOSITORY, GITHUB_EVENT_PATH (the pull
            request's number), or ROLLSAFE_COMMENT_PR
    GitLab: CI_API_V4_URL, CI_PROJECT_ID, CI_MERGE_REQUEST_IID

templates/rollsafe.yml embeds a copy of this file for GitLab (a component
ships only its YAML); ci/test-comment.py checks that the two are equal.

A comment that cannot be written never fails the job: the findings are in
the annotations and the summary already. A token that may not write (a
fork's pull request gets a read-only one) is said in one log line.
"""

import hashlib
import json
import os
import sys
import urllib.error
import urllib.request

# GitHub refuses a comment body past 65,536 characters; a GitLab note may
# hold 1,000,000.
GITHUB_LIMIT = 65536
GITLAB_LIMIT = 1_000_000
PER_PAGE = 100
# Comments read at most (pages of PER_PAGE) before creating a new one.
MAX_PAGES = 50


def log(line):
    print(f"rollsafe comment: {line}", flush=True)


class Api:
    """The two calls, for one forge."""

    def __init__(self, env):
        self.token = env.get("ROLLSAFE_COMMENT_TOKEN", "")
        if env.get("CI_MERGE_REQUEST_IID"):
            self.forge = "gitlab"
            base = env["CI_API_V4_URL"].rstrip("/")
            project = urllib.request.quote(env["CI_PROJECT_ID"], safe="")
            self.list_url = f"{base}/projects/{project}/merge_requests/{env['CI_MERGE_REQUEST_IID']}/notes"
            self.one_url = self.list_url + "/{id}"
            self.create_url = self.list_url
            self.update_method = "PUT"
            self.limit = GITLAB_LIMIT
            self.what = "merge request note"
        else:
            self.forge = "github"
            number = env.get("ROLLSAFE_COMMENT_PR") or pull_request_number(env.get("GITHUB_EVENT_PATH"))
            if not number:
                raise NotAPullRequest()
            base = env.get("GITHUB_API_URL", "https://api.github.com").rstrip("/")
            repo = env["GITHUB_REPOSITORY"]
            self.list_url = f"{base}/repos/{repo}/issues/{number}/comments"
            self.one_url = f"{base}/repos/{repo}/issues/comments/{{id}}"
            self.create_url = self.list_url
            self.update_method = "PATCH"
            self.limit = GITHUB_LIMIT
            self.what = "pull request comment"

    def call(self, method, url, body=None):
        headers = {"Accept": "application/json", "User-Agent": "rollsafe"}
        if self.forge == "gitlab":
            headers["PRIVATE-TOKEN"] = self.token
        else:
            headers["Authorization"] = f"Bearer {self.token}"
            headers["Accept"] = "application/vnd.github+json"
            headers["X-GitHub-Api-Version"] = "2022-11-28"
        data = None
        if body is not None:
            data = json.dumps({"body": body}).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def find(self, marker):
        for page in range(1, MAX_PAGES + 1):
            comments = self.call("GET", f"{self.list_url}?per_page={PER_PAGE}&page={page}")
            for c in comments or []:
                if marker in (c.get("body") or ""):
                    return c["id"]
            if not comments or len(comments) < PER_PAGE:
                return None
        return None


class NotAPullRequest(Exception):
    pass


def pull_request_number(event_path):
    if not event_path or not os.path.exists(event_path):
        return None
    with open(event_path, encoding="utf-8") as f:
        event = json.load(f)
    return (event.get("pull_request") or {}).get("number")


def marker_of(target):
    key = hashlib.sha256(target.encode()).hexdigest()[:16]
    return f"<!-- rollsafe:verify target={key} -->"


def fitted(summary, marker, link, limit):
    """The comment body: the summary, or past `limit` characters its head
    (title, verdict), its error rows and a link to the full summary."""
    body = f"{marker}\n{summary}"
    if len(body) <= limit:
        return body
    lines = summary.splitlines()
    head = []
    for line in lines:
        if line.startswith("#### "):
            break
        head.append(line)
    errors = [l for l in lines if l.startswith("| **error** |")]
    tail = f"\n\nThe full report is longer than a comment may be: {link}\n"
    out = [marker, *head, "#### Errors", "", "| severity | id | where | message |", "|---|---|---|---|"]
    size = sum(len(l) + 1 for l in out) + len(tail) + 200
    shown = 0
    for row in errors:
        if size + len(row) + 1 > limit:
            break
        out.append(row)
        size += len(row) + 1
        shown += 1
    if shown < len(errors):
        out.append(f"\n… and {len(errors) - shown} more errors")
    return "\n".join(out) + tail


def main(env):
    try:
        api = Api(env)
    except NotAPullRequest:
        log("not a pull request event: no comment")
        return 0
    except KeyError as e:
        log(f"{e.args[0]} is not set: no comment")
        return 0
    if not api.token:
        log(f"no token given: no {api.what} (the summary and annotations have the findings)")
        return 0
    try:
        with open(env.get("ROLLSAFE_COMMENT_FILE", ""), encoding="utf-8") as f:
            summary = f.read()
    except OSError:
        log(f"no summary was written (rollsafe could not run): no {api.what}")
        return 0
    marker = marker_of(env.get("ROLLSAFE_COMMENT_TARGET", ""))
    body = fitted(summary, marker, env.get("ROLLSAFE_COMMENT_LINK", "the job's summary"), api.limit)
    try:
        existing = api.find(marker)
        if existing is None:
            created = api.call("POST", api.create_url, body)
            log(f"created {api.what} {created.get('id')} ({len(body)} characters)")
        else:
            api.call(api.update_method, api.one_url.format(id=existing), body)
            log(f"updated {api.what} {existing} in place ({len(body)} characters)")
    except urllib.error.HTTPError as e:
        if e.code in (401, 403, 404):
            log(
                f"the token may not write a {api.what} here (HTTP {e.code}; a fork's pull request "
                "gets a read-only token): the annotations and the summary have the findings"
            )
        else:
            log(f"the {api.what} could not be written: HTTP {e.code} {e.reason}")
        return 0
    except (urllib.error.URLError, OSError, ValueError) as e:
        log(f"the {api.what} could not be written: {e}")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
