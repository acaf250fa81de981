"""Runs at the start of every interpreter a kvcal engine starts (see kvcal.engines.boot)."""

from kvcal.engines import shields

if __name__ == "sitecustomize":  # Python's start-up hook, not a test importing the module
    shields.apply_inherited()
    shields.run_shadowed_sitecustomize(__file__)
