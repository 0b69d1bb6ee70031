"""python -m dflash_tune ...: the packaged dflash-tune command (see cli.py)."""
from .cli import main

main()
