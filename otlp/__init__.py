"""otlp: optimal multi-draft speculative sampling."""
