"""The write-ahead log in C: its records (with their CRC) and its writer thread."""
