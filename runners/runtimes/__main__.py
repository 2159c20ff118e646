import sys

from .container import main

sys.exit(main(sys.argv[1:]))
