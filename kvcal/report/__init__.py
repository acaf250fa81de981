"""The HTML report (``kvcal report``): one self-contained page per run, comparison, history or fleet study.

Above ``fleet`` in the package order: a page reads every stage's records (a fit, emit's
threshold, compare's result, a fleet result) and computes nothing they do not.
"""
