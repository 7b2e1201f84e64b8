"""Run the python blocks of one documentation page, in order, as one script would.

    python tests/docs_runner.py < blocks.json

``blocks.json`` is a list of ``{"page": ..., "line": ..., "code": ...}`` (``tests/test_docs.py``
writes it). The blocks run in a fresh module named ``__main__``, as if a reader had pasted
them one after the other into a script and run it: tools defined before a ``Runtime``
starts are importable by its processes, and one defined after is refused, as for a user.
A traceback names the page and its line (each block is compiled at its line in the page).
Exit status 1 on the first block that raises.
"""

from __future__ import annotations

import json
import sys
import traceback
import types


def main() -> int:
    blocks = json.load(sys.stdin)
    script = types.ModuleType("__main__")
    script.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = script
    for block in blocks:
        source = "\n" * (block["line"] - 1) + block["code"]
        try:
            exec(compile(source, block["page"], "exec"), script.__dict__)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED: the block at {block['page']}, line {block['line']}", file=sys.stderr)
            return 1
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
