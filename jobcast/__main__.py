"""``python -m jobcast``."""

from jobcast.cli.app import main

main()
