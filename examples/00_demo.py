"""The main demo (``make demo``): streamed text, parallel tools, an approval, a stop.

python examples/00_demo.py          # asks before deleting the file
python examples/00_demo.py --yes    # approves without asking (--no denies)
"""

from actors.testing.demo import main

if __name__ == "__main__":
    raise SystemExit(main())
