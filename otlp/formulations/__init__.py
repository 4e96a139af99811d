"""otlp.formulations"""
