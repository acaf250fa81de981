"""emit-config's output formats: one module each, rendering a fit's threshold into what the router or engines read."""
