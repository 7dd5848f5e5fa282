"""jobcast: forecast how long a CNN training job will take, before it runs."""

__version__ = "0.1.0"
