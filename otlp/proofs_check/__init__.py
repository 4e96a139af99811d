"""otlp.proofs_check"""
