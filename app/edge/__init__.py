"""The HTTP edge: the routes, the body limit, each client's share and the access log."""
