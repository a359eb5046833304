"""Every Markdown file of the project renders as its author meant it.

The files are parsed with a CommonMark parser (markdown-it-py, pinned in
requirements.txt), and the code blocks it finds are checked for the three
ways a fence goes wrong without anyone noticing in a text editor:

- a fence that is never closed runs on to the end of the file (or of the
  list item or quote it sits in);
- a line meant to close a fence that carries text after it (``` Foo) does
  not close it: CommonMark allows only spaces after a closing fence;
- either way, the text after it becomes code: a heading, or the opening
  line of the next fence (```python), ends up inside the block.
"""
import os
import re
import subprocess

import pytest
from markdown_it import MarkdownIt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def markdown_files():
    """README.md, docs/, e2e/, examples/ and the rest: every tracked .md."""
    try:
        listed = subprocess.run(
            ["git", "-C", ROOT, "ls-files", "-z", "--", "*.md"],
            capture_output=True, text=True, check=True).stdout.split("\0")
        files = [p for p in listed if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for top, dirs, names in os.walk(ROOT):
            dirs[:] = [d for d in dirs if not d.startswith((".", "bazel-"))]
            files += [os.path.relpath(os.path.join(top, n), ROOT)
                      for n in names if n.endswith(".md")]
    return sorted(f for f in files if os.path.exists(os.path.join(ROOT, f)))


FENCE_LINE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<rest>.*)$")
HEADING_LINE = re.compile(r"^ {0,3}#{1,6} \S")


def _strip_containers(line):
    """A source line without the quote markers a block inside > has."""
    return re.sub(r"^(\s*>)+ ?", "", line)


def fence_problems(text):
    """(line number, what is wrong) for each broken code block of a page."""
    lines = text.splitlines()
    problems = []
    for token in MarkdownIt("commonmark").parse(text):
        if token.type not in ("fence", "code_block") or not token.map:
            continue
        start, end = token.map          # 0-based, end exclusive
        first = start + 1
        body = token.content.splitlines()
        if token.type == "fence":
            marker = token.markup        # the opening run: ``` or ````...
            last = _strip_containers(lines[end - 1]).strip() if end > start + 1 else ""
            closed = (end - 1 > start
                      and re.fullmatch(re.escape(marker[0]) + "{%d,}" % len(marker), last))
            if not closed:
                problems.append((first, f"the {marker} fence opened here is never "
                                        "closed: it runs on to line %d" % end))
            for offset, line in enumerate(body):
                match = FENCE_LINE.match(line)
                if not match or match.group("fence")[0] != marker[0]:
                    continue
                if len(match.group("fence")) < len(marker):
                    continue             # a shorter fence shown inside a longer one
                rest = match.group("rest").strip()
                if not rest:
                    continue
                if re.fullmatch(r"[a-z0-9_+.-]+", rest):   # a language name
                    what = (f"'{line.strip()}' opens no new block: it is inside the "
                            f"{marker} fence of line {first}, still open")
                else:
                    what = (f"'{line.strip()}' does not close the {marker} fence of "
                            f"line {first} (a closing fence takes nothing after it)")
                problems.append((first + 1 + offset, what))
        heading_body = body
        for offset, line in enumerate(heading_body):
            if not HEADING_LINE.match(line):
                continue
            before = heading_body[offset - 1].strip() if offset else ""
            after = heading_body[offset + 1].strip() if offset + 1 < len(heading_body) else ""
            if token.type == "code_block" or (not before and not after):
                where = first + offset + (1 if token.type == "fence" else 0)
                problems.append((
                    where, f"the heading '{line.strip()}' is inside the code block "
                           f"of line {first}"))
    return sorted(problems)


@pytest.mark.parametrize("name", markdown_files())
def test_code_blocks_are_closed_and_swallow_no_heading(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        text = f.read()
    problems = fence_problems(text)
    assert not problems, "\n".join(f"{name}:{line}: {what}" for line, what in problems)


def test_every_markdown_area_is_checked():
    files = markdown_files()
    assert "README.md" in files
    assert "docs/getting-started.md" in files
    assert any(f.startswith("examples/") for f in files)


@pytest.mark.parametrize("text, expected", [
    # The line with text after the fence: the block runs on and takes the
    # heading and the next fence's opening line with it.
    ("# T\n\n```sh\npip install x\n``` Without\nmore\n\n## Next\n\n```python\n"
     "import x\n```\n", ["does not close", "heading '## Next'", "opens no new block"]),
    ("# T\n\n```sh\npip install x\n", ["never closed"]),
    ("# T\n\n```sh\npip install x\n```\n\n## Next\n", []),
    # A shell comment is no heading; a longer fence may show a shorter one.
    ("```sh\n# install\npip install x\n```\n", []),
    ("````markdown\n```sh\nls\n```\n````\n", []),
    ("- item\n\n  ```sh\n  ls\n  ```\n", []),
    ("> ```sh\n> ls\n> ```\n", []),
    ("    ## indented\n", ["heading '## indented'"]),
])
def test_fence_problems_finds_what_breaks_rendering(text, expected):
    found = [what for _, what in fence_problems(text)]
    assert len(found) == len(expected), found
    for what, part in zip(found, expected):
        assert part in what, (what, part)
