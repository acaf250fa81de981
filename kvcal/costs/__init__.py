"""The cost curve every stage shares and the simulated pair's true curves.

What it holds: one leg's cost at a prefix length and where two legs cross (:mod:`~kvcal.costs.cost_curve`), and
the simulated pair's true curves and noise, declared once (:mod:`~kvcal.costs.simulated`).

May import: files/ and the root modules.
"""
