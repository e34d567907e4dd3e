"""ldptut: local differential privacy mechanisms and a federated-learning simulator for the book."""
__version__ = "0.1.0"
