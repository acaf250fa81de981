"""kvcal: calibrate when an inference fleet should pull KV cache from a peer instead of recomputing it."""

__version__ = "0.1.0"
