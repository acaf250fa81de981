"""Report stage: comparing runs, plotting fits, trends over history."""
