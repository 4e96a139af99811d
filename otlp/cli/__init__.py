"""otlp.cli: the ``otlp`` command. ``commands`` (the parser, the subcommands and ``main``), ``util`` (the one-line
error contract and progress), and one module per subcommand family: ``decode`` (``otlp decode``, ``otlp bench
acceptance``), ``multistep`` (``otlp certify-block``), ``sweep`` (``otlp sweep``), ``check`` (``otlp check``)."""
