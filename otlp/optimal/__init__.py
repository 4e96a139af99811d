"""otlp.optimal"""
