"""Interfaces other projects import by path (Helion's Pallas launcher); not a public API."""
