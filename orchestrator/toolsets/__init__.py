"""Ready-made toolsets built on the public tool API: :mod:`.notes` (an SQLite notepad per run)."""
