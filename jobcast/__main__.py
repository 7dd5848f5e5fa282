"""``python -m jobcast``."""

from jobcast.cli import main

main()
