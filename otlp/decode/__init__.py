"""otlp.decode"""
