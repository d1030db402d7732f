"""beava: a real-time feature server and its Python SDK."""

__version__ = "0.1.0"
