"""The typer layer: ``app.py`` parses arguments and calls agent/, node/ and tools/; nothing imports it."""
