import sys

from ssl_app.sweep.command import main

sys.exit(main())
