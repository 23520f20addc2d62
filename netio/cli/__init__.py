"""Command-line entry points: thin wrappers that parse, call the library, render."""
