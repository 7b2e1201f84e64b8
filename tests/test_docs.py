"""Every code block of the README and of docs/ is of a known kind, and every python block runs.

- ``python`` blocks run: the blocks of one page in order, in a subprocess of their own (a
  runtime's transport settings are one per process, and a page may set them), against a
  ``ScriptedProvider`` that the variables the examples read (``OPENAI_BASE_URL``,
  ``ANTHROPIC_BASE_URL``) point at, answering the page's prompts from
  ``tests/docs_models.py``. Every page but the home page first runs the home page's block,
  which defines ``provider``.
- ``sh`` blocks are commands for a person's shell and do not run (see ``EXEMPT``); their
  ``greenroom`` lines are parsed by the command line's own parser.
- ``text`` blocks are output, trees and diagrams, and do not run.

The build of the site itself (links, anchors, the nav) is ``make docs``, run by ``make test``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from actors.cli import build_parser
from actors.console.cli import _parser as console_parser
from actors.testing import ScriptedProvider

from .docs_models import EXPECT, SCRIPTS, DocsModel

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
HOME = "docs/index.md"

RUN = "python"
EXEMPT = {
    "sh": "commands for a person's shell (make, pip, git, greenroom): they install things, start "
    "long-lived processes, or need a network or a second machine",
    "text": "output, trees and diagrams: nothing to run",
}

_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # the line of the page where the code starts
    lang: str
    code: str


def blocks(page: str) -> list[Block]:
    """The fenced code blocks of ``page``, in order (indented ones dedented)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    out = []
    for m in _FENCE.finditer(text):
        indent = len(m["indent"])
        code = "".join(line[indent:] for line in m["body"].splitlines(keepends=True))
        line = text.count("\n", 0, m.start("body")) + 1
        out.append(Block(page, line, (m["info"].split() or [""])[0], code))
    return out


def python_pages() -> list[str]:
    return [p for p in PAGES if any(b.lang == RUN for b in blocks(p))]


# -- what needs no actor system -------------------------------------------------------------


def test_every_code_block_is_of_a_kind_that_runs_or_is_exempt_for_a_reason() -> None:
    every = [b for page in PAGES for b in blocks(page)]
    unknown = [
        f"{b.page}:{b.line} ({b.lang or 'no language'})" for b in every if b.lang != RUN and b.lang not in EXEMPT
    ]
    assert unknown == [], f"say which kind each block is: {RUN!r} (runs) or one of {sorted(EXEMPT)}"


def test_the_pages_hold_python_blocks_to_run() -> None:
    assert {"README.md", HOME, "docs/tools.md", "docs/turns.md"} <= set(python_pages())


def test_every_page_with_examples_has_its_scripts_and_no_script_is_left_over() -> None:
    assert set(SCRIPTS) | set(EXPECT) <= set(python_pages())


def test_the_home_page_opens_with_the_provider_the_other_pages_use() -> None:
    first = next(b for b in blocks(HOME) if b.lang == RUN)
    assert "provider = ProviderConfig(" in first.code
    quickstart = next(b for b in blocks("README.md") if b.lang == RUN)
    assert first.code.split("provider = ", 1)[1] in quickstart.code  # the README defines the same one


def greenroom_lines() -> list[tuple[str, list[str]]]:
    found = []
    for page in PAGES:
        for b in blocks(page):
            if b.lang != "sh":
                continue
            for n, line in enumerate(b.code.splitlines()):
                words = shlex.split(line, comments=True)
                if words[:1] == ["greenroom"]:
                    found.append((f"{page}:{b.line + n}", words[1:]))
    return found


def test_the_greenroom_command_lines_of_the_docs_parse() -> None:
    lines = greenroom_lines()
    assert {args[0] for _, args in lines} == {
        "turns", "approve", "deny", "stop", "cancel", "nodes", "node", "demo", "console", "send-input", "pause", "resume",
        "sessions", "fork",
    }  # fmt: skip
    for where, args in lines:
        if args[0] in ("demo", "node"):  # they parse their own options, in the command itself
            continue
        try:
            if args[0] == "console":  # its own parser, in actors.console.cli
                console_parser().parse_args(args[1:])
            else:
                build_parser().parse_args(args)
        except SystemExit:
            pytest.fail(f"{where}: greenroom {' '.join(args)} does not parse")


def test_the_readme_links_to_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert missing == []


# -- the examples run -----------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("page", python_pages())
def test_the_python_blocks_of(page: str) -> None:
    code = [b for b in blocks(page) if b.lang == RUN]
    if page not in ("README.md", HOME):
        code = [next(b for b in blocks(HOME) if b.lang == RUN), *code]
    model = DocsModel(page)
    with ScriptedProvider(responder=model) as scripted:
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            OPENAI_BASE_URL=scripted.base_url,
            OPENAI_API_KEY="sk-placeholder-for-the-docs-test",
            ANTHROPIC_BASE_URL=f"http://127.0.0.1:{scripted.port}",
            ANTHROPIC_API_KEY="placeholder-for-the-docs-test",
            GREENROOM_KEY="a-deployment-key-for-the-docs-test",
        )
        proc = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "docs_runner.py")],
            input=json.dumps([b.__dict__ for b in code]),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=240,
            env=env,
            cwd=ROOT,
        )
    print(proc.stdout)  # what the examples printed (pytest -s shows it)
    assert proc.returncode == 0, proc.stdout
    assert model.unknown == [], f"prompts with no script in tests/docs_models.py: {model.unknown}\n{proc.stdout}"
    assert model.asked == set(SCRIPTS.get(page, {})), proc.stdout
    printed = proc.stdout.splitlines()
    missing = [line for line in EXPECT.get(page, []) if line not in printed]
    assert missing == [], proc.stdout
