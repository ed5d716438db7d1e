"""HTTP helpers: TLS contexts, bounded answer bodies, JSON heads, the server."""
