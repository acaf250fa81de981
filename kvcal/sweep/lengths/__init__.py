"""Which prefix lengths a campaign probes, decided in one place.

* :mod:`probe_plan` - the default ladder, lengths checked against the block size and the model's limit, and the
  seeded shuffled plan of probes;
* :mod:`grow_below` - the default design grown below its shortest length while the pull wins there, and what a
  campaign that ends at either end of its range tells the user;
* :mod:`adaptive_design` - ``--adaptive``: where the next probes go so the break-even's interval shrinks fastest.

``kvcal plan``, which simulates those designs' campaigns on a prior's curves, is :mod:`kvcal.plan`, above the sweep.

The arithmetic the fit's advice shares (the floor a pull can prove, the octave below a length, the ladder's steps
above) is :mod:`kvcal.fit.ladder_steps`: the fit sits below the sweep, so it cannot import it from here.
"""
