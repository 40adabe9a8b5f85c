"""Frame capture: the PEP 523 hook, guards, the symbolic bytecode evaluator and its graph."""
