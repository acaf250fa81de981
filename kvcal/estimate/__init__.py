"""First-principles estimates: model and hardware profiles, predicted curves, sanity checks of a measurement."""
