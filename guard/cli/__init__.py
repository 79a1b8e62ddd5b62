"""guard.cli: the command line. ``main`` parses and dispatches; one module per command family;
each imports heavy modules only inside the command that needs them."""
