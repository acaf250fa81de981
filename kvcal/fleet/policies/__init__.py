"""The fleet study's routing policies: each one when the router pulls from a peer instead of recomputing."""
