"""The ``worldsim`` command line: thin commands over the library's functions."""
