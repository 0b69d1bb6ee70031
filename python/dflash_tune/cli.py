"""The dflash-tune command for pip users (``dflash-tune ...`` or ``python -m dflash_tune ...``): runs the
dflash-tune executable installed with the package, with the same arguments (warmup, verify-cache, list, ...;
``--help`` lists them)."""
import os
import sys


def main() -> None:
    from . import binary

    path = str(binary())
    if not os.access(path, os.X_OK):
        sys.exit(f"dflash_tune: the packaged dflash-tune executable is missing ({path}); reinstall the package")
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
