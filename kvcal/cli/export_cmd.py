"""`kvcal export` (not yet built)."""


def register(app) -> None:  # placeholder until the command lands
    return None
