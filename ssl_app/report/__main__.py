import sys

from ssl_app.report.cli import main

if __name__ == "__main__":
    sys.exit(main())
