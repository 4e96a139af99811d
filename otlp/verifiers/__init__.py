"""otlp.verifiers"""
