"""Engine pairs that kvcal can drive; each engine is one module behind :class:`EnginePair`."""
