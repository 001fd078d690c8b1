import sys

from gcdoctor.cli import main

sys.exit(main())
