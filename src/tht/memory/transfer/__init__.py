"""Cards in and out in bulk: ``tht memory import`` and ``tht memory export``."""
