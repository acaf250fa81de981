"""Emit stage: the threshold rule and every output format (router plugin, Helm values, engine flags, k8s Job)."""
