"""The threshold rules (``--rule``), one module each: the default ``expected-cost`` (:mod:`.expected_cost`)
and ``upper`` (:mod:`.upper`). May import what :mod:`kvcal.threshold` may."""
