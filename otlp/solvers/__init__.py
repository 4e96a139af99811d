"""otlp.solvers"""
