"""Readers for public whole-network benchmark corpora (measured training throughput)."""
