"""``python -m cogra.bench``: the same as ``cogra bench``."""

import sys

from cogra.bench import main

if __name__ == "__main__":
    sys.exit(main())
